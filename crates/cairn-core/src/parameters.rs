//! Parameters of a verification, as papermill users know them: values injected as a code cell
//! tagged `injected-parameters` right after the cell tagged `parameters` (or first, when there is
//! none), each `name = <Python literal>`. A document verified with parameters re-runs under
//! plain papermill with the same values, and under plain nbconvert, since the injected cell is in
//! the notebook.

use serde_json::{Map, Value};

use crate::document::{CellKind, DocCell};

/// The cell holding a notebook's default parameters.
pub const TAG_PARAMETERS: &str = "parameters";
/// The cell papermill (and Cairn) inject with the given values.
pub const TAG_INJECTED: &str = "injected-parameters";

/// The most parameters one verification takes.
pub const MAX_PARAMETERS: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParameterError {
    #[error(
        "parameter `{0}` is not a Python name; use letters, digits and `_`, not starting with a digit, and not a keyword"
    )]
    Name(String),
    #[error("{file}: {reason}; give a JSON or YAML object of NAME: VALUE")]
    File { file: String, reason: String },
    #[error("{0} parameters is too many; give at most {MAX_PARAMETERS}")]
    TooMany(usize),
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
    "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
    "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
];

/// A parameter's name must be a Python identifier: it becomes an assignment.
pub fn check_name(name: &str) -> Result<(), ParameterError> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&name);
    if ok { Ok(()) } else { Err(ParameterError::Name(name.to_string())) }
}

/// A JSON value as a Python literal: `None`, `True`/`False`, numbers, strings (JSON's string
/// syntax is Python's), lists and dicts.
pub fn python_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(_) => v.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(python_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), python_literal(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A `-p NAME VALUE` value, typed as papermill types it: `True`/`False`, `None`, an integer, a
/// float, else the string itself.
pub fn cli_value(text: &str) -> Value {
    match text {
        "True" => return Value::Bool(true),
        "False" => return Value::Bool(false),
        "None" => return Value::Null,
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(f) = text.parse::<f64>()
        && f.is_finite()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return Value::Number(n);
    }
    Value::String(text.to_string())
}

/// A parameters file: JSON (`.json`) or YAML (anything else), one object of NAME: VALUE.
pub fn parse_file(text: &str, file: &str) -> Result<Map<String, Value>, ParameterError> {
    let fail = |reason: String| ParameterError::File { file: file.to_string(), reason };
    let value: Value = if file.ends_with(".json") {
        serde_json::from_str(text).map_err(|e| fail(format!("not JSON: {e}")))?
    } else {
        serde_norway::from_str(text).map_err(|e| fail(format!("not YAML: {e}")))?
    };
    match value {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(fail(format!("it holds {}, not an object", kind(&other)))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The injected cell's source, as papermill writes it.
pub fn injected_source(params: &Map<String, Value>) -> String {
    let mut s = String::from("# Parameters\n");
    for (name, value) in params {
        s.push_str(&format!("{name} = {}\n", python_literal(value)));
    }
    s
}

/// Injects `params` into a document's cells: an `injected-parameters` cell after the cell
/// tagged `parameters` (or first), replacing one a previous run injected. Returns the injected
/// cell's position among all cells; `None` (nothing changed) without parameters.
pub fn inject(cells: &mut Vec<DocCell>, params: &Map<String, Value>) -> Result<Option<usize>, ParameterError> {
    if params.is_empty() {
        return Ok(None);
    }
    if params.len() > MAX_PARAMETERS {
        return Err(ParameterError::TooMany(params.len()));
    }
    for name in params.keys() {
        check_name(name)?;
    }
    cells.retain(|c| !(c.kind == CellKind::Code && c.has_tag(TAG_INJECTED)));
    let at = cells.iter().position(|c| c.kind == CellKind::Code && c.has_tag(TAG_PARAMETERS)).map_or(0, |i| i + 1);
    let mut metadata = Map::new();
    metadata.insert("tags".into(), Value::Array(vec![Value::String(TAG_INJECTED.into())]));
    let source = injected_source(params);
    cells.insert(at, DocCell { kind: CellKind::Code, source: source.trim_end().to_string(), line: None, metadata });
    Ok(Some(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn code(source: &str, tags: &[&str]) -> DocCell {
        let mut metadata = Map::new();
        metadata.insert("tags".into(), json!(tags));
        DocCell { kind: CellKind::Code, source: source.into(), line: None, metadata }
    }

    #[test]
    fn values_become_python_literals_as_papermill_writes_them() {
        let v =
            json!({"n": 3, "x": 0.5, "s": "it's \"q\"\n", "b": true, "none": null, "l": [1, "a"], "d": {"k": false}});
        let src = injected_source(v.as_object().unwrap());
        assert_eq!(
            src,
            "# Parameters\nn = 3\nx = 0.5\ns = \"it's \\\"q\\\"\\n\"\nb = True\nnone = None\nl = [1, \"a\"]\nd = {\"k\": False}\n"
        );
        assert_eq!(cli_value("12"), json!(12));
        assert_eq!(cli_value("1.5"), json!(1.5));
        assert_eq!(cli_value("True"), json!(true));
        assert_eq!(cli_value("None"), Value::Null);
        assert_eq!(cli_value("nan"), json!("nan"), "not a finite number: the string");
        assert_eq!(cli_value("data/x.csv"), json!("data/x.csv"));
    }

    #[test]
    fn the_injected_cell_follows_the_parameters_cell_or_comes_first() {
        let params = json!({"alpha": 2}).as_object().unwrap().clone();
        let mut cells = vec![code("import x", &[]), code("alpha = 1", &["parameters"]), code("print(alpha)", &[])];
        assert_eq!(inject(&mut cells, &params).unwrap(), Some(2));
        assert_eq!(cells[2].source, "# Parameters\nalpha = 2");
        assert!(cells[2].has_tag(TAG_INJECTED));
        // Again (a notebook that carries an injected cell): replaced, not added.
        cells[2].source = "# Parameters\nalpha = 9".into();
        assert_eq!(inject(&mut cells, &params).unwrap(), Some(2));
        assert_eq!(cells.len(), 4);
        assert_eq!(cells[2].source, "# Parameters\nalpha = 2");
        let mut none = vec![code("print(alpha)", &[])];
        assert_eq!(inject(&mut none, &params).unwrap(), Some(0));
        assert_eq!(inject(&mut none, &Map::new()).unwrap(), None);
    }

    #[test]
    fn bad_names_and_files_are_refused_naming_them() {
        let mut cells = vec![];
        for bad in ["1x", "a-b", "class", "", "é"] {
            let params = json!({ bad: 1 }).as_object().unwrap().clone();
            assert_eq!(inject(&mut cells, &params), Err(ParameterError::Name(bad.into())), "{bad}");
        }
        assert!(parse_file("a: [1", "p.yaml").unwrap_err().to_string().starts_with("p.yaml: not YAML"));
        assert!(parse_file("[1]", "p.json").unwrap_err().to_string().contains("it holds a list, not an object"));
        assert_eq!(
            parse_file("a: 1\nb: x\n", "p.yml").unwrap(),
            json!({"a": 1, "b": "x"}).as_object().unwrap().clone()
        );
    }
}
