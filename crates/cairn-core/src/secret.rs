//! Secrets a tool declares by name (`secrets = ["DB_PASSWORD"]`): what a name may be, and the
//! redaction that keeps their values out of everything Cairn records. A value reaches its tool's
//! environment at launch and nowhere else; a name is part of the tool's digest, a value never is
//! (rotating a password is not a new signature).

use serde_json::Value;

/// The shortest value Cairn keeps out of its records: a shorter one would be replaced wherever
/// those few characters appear, which says more than it hides.
pub const MIN_SECRET_LEN: usize = 4;

/// The largest value: a credential, not a file.
pub const MAX_SECRET_LEN: usize = 64 * 1024;

/// Variables Cairn sets itself, or that a process needs to be found and run: never a secret's.
const RESERVED: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "LANG", "TMPDIR", "LD_PRELOAD", "LD_LIBRARY_PATH"];

/// Why a secret's name or value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error(
        "`{0}` is not a secret name: use 1 to 128 of A-Z, 0-9 and `_`, not starting with a digit (it is the environment variable the tool reads)"
    )]
    InvalidName(String),
    #[error("`{0}` cannot be a secret: Cairn or the process itself sets that variable")]
    ReservedName(String),
    #[error(
        "the value of secret `{name}` is {len} byte(s); a secret must be {MIN_SECRET_LEN} to {MAX_SECRET_LEN} bytes (a shorter one could not be kept out of logs)"
    )]
    BadLength { name: String, len: usize },
    #[error("the value of secret `{0}` holds a NUL or a newline; an environment variable cannot carry it")]
    BadByte(String),
}

/// Checks a secret's name.
pub fn check_name(name: &str) -> Result<(), SecretError> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if !ok {
        return Err(SecretError::InvalidName(name.to_string()));
    }
    if RESERVED.contains(&name) || name.starts_with("CAIRN_") {
        return Err(SecretError::ReservedName(name.to_string()));
    }
    Ok(())
}

/// Checks a secret's value.
pub fn check_value(name: &str, value: &str) -> Result<(), SecretError> {
    if value.len() < MIN_SECRET_LEN || value.len() > MAX_SECRET_LEN {
        return Err(SecretError::BadLength { name: name.to_string(), len: value.len() });
    }
    if value.contains(['\0', '\n', '\r']) {
        return Err(SecretError::BadByte(name.to_string()));
    }
    Ok(())
}

/// Replaces every secret value in what a tool printed by `[secret NAME]`.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// `(name, value)`, longest value first, so a value containing another is replaced whole.
    values: Vec<(String, String)>,
}

impl Redactor {
    pub fn new(secrets: &[(String, String)]) -> Redactor {
        let mut values: Vec<(String, String)> =
            secrets.iter().filter(|(_, v)| !v.is_empty()).map(|(n, v)| (n.clone(), v.clone())).collect();
        values.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
        Redactor { values }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (name, value) in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[secret {name}]"));
            }
        }
        out
    }

    /// Every string of a JSON value, keys too.
    pub fn redact_json(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.redact(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.redact_json(x)).collect()),
            Value::Object(o) => Value::Object(o.iter().map(|(k, x)| (self.redact(k), self.redact_json(x))).collect()),
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_values_are_checked() {
        assert!(check_name("DB_PASSWORD").is_ok());
        assert!(check_name("_X1").is_ok());
        for bad in ["", "db", "1X", "A-B", "A B", &"A".repeat(129)] {
            assert!(matches!(check_name(bad), Err(SecretError::InvalidName(_))), "{bad}");
        }
        for reserved in ["PATH", "HOME", "CAIRN_RUN_ID"] {
            assert!(matches!(check_name(reserved), Err(SecretError::ReservedName(_))), "{reserved}");
        }
        assert!(check_value("X", "s3cret").is_ok());
        assert!(matches!(check_value("X", "abc"), Err(SecretError::BadLength { .. })));
        assert!(matches!(check_value("X", "two\nlines"), Err(SecretError::BadByte(_))));
    }

    #[test]
    fn every_value_is_replaced_by_its_name_longest_first() {
        let r = Redactor::new(&[("A".into(), "hunter2".into()), ("B".into(), "hunter2-long".into())]);
        assert_eq!(r.redact("x hunter2-long y hunter2 z"), "x [secret B] y [secret A] z");
        let v = r.redact_json(&json!({"hunter2": ["p=hunter2", 3, {"k": "hunter2-long"}]}));
        assert_eq!(v, json!({"[secret A]": ["p=[secret A]", 3, {"k": "[secret B]"}]}));
        assert!(Redactor::new(&[]).is_empty());
    }
}
