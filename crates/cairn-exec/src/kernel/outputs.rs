//! One cell's iopub messages folded into nbformat v4 output dicts, with size caps.
//!
//! Pure: no IO. The caps keep a cell that prints without end from exhausting memory; everything
//! cut is counted and shown with a visible marker, never silently dropped.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

/// Size caps on what one cell keeps, in bytes of text (UTF-8) or encoded data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Per output: a stream's text, each mime entry of a rich output, an error's strings.
    pub per_output: usize,
    /// All outputs of the cell together; beyond it, further outputs are counted and dropped.
    pub per_cell: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits { per_output: 1024 * 1024, per_cell: 8 * 1024 * 1024 }
    }
}

/// The marker that replaces what a cap cut off.
pub fn truncation_marker(omitted: usize) -> String {
    format!("\n[... output truncated by cairn: {omitted} bytes omitted ...]")
}

/// Mime types whose value is text that stays meaningful when cut (an image or JSON does not).
fn is_truncatable_text(mime: &str) -> bool {
    mime.starts_with("text/") || mime == "application/javascript" || mime == "image/svg+xml"
}

/// Whether nbformat lets a mime type's data be any JSON (`^application/(.*\+)?json$`).
fn is_json_mime(mime: &str) -> bool {
    mime.strip_prefix("application/")
        .and_then(|rest| rest.strip_suffix("json"))
        .is_some_and(|head| head.is_empty() || head.ends_with('+'))
}

/// nbformat allows a multiline string as a list of strings; fold it to one string.
fn joined_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) if is_text(v) => Some(parts.iter().filter_map(Value::as_str).collect::<String>()),
        _ => None,
    }
}

/// Whether `v` is text as nbformat holds it (a string, or a list of strings), without copying it.
fn is_text(v: &Value) -> bool {
    match v {
        Value::String(_) => true,
        Value::Array(parts) => parts.iter().all(Value::is_string),
        _ => false,
    }
}

use cairn_core::canonical::prefix_within as prefix;

/// Caps one string at `max` bytes, appending the marker when cut. Returns (text, kept bytes).
fn cap_string(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let kept = prefix(s, max);
    let mut out = String::with_capacity(kept.len() + 64);
    out.push_str(kept);
    out.push_str(&truncation_marker(s.len() - kept.len()));
    out
}

/// Caps a mime bundle entry by entry; returns the capped bundle and its size in bytes.
fn cap_bundle(data: &Map<String, Value>, max: usize) -> (Map<String, Value>, usize) {
    let mut out = Map::new();
    let mut size = 0;
    let mut dropped: Vec<(String, usize)> = Vec::new();
    for (mime, value) in data {
        // nbformat holds any other mime type's data as text (a string, or a list of strings): a
        // value a kernel sent otherwise is kept as its JSON text, so the notebook stays valid.
        let as_text;
        let value = if is_json_mime(mime) || is_text(value) {
            value
        } else {
            as_text = Value::String(value.to_string());
            &as_text
        };
        if (is_truncatable_text(mime) || !mime.contains('/'))
            && let Some(text) = joined_text(value)
        {
            let capped = cap_string(&text, max);
            size += capped.len();
            out.insert(mime.clone(), Value::String(capped));
            continue;
        }
        // Binary (base64) or structured data: cutting it would corrupt it, so it is kept whole
        // or left out with a note in text/plain.
        let len = match value {
            Value::String(s) => s.len(),
            other => other.to_string().len(),
        };
        if len <= max {
            size += len;
            out.insert(mime.clone(), value.clone());
        } else {
            dropped.push((mime.clone(), len));
        }
    }
    if !dropped.is_empty() {
        let mut note = out.get("text/plain").and_then(Value::as_str).unwrap_or_default().to_string();
        for (mime, len) in dropped {
            note.push_str(&format!("\n[... {mime} output omitted by cairn: {len} bytes over the {max}-byte cap ...]"));
        }
        size += note.len();
        out.insert("text/plain".to_string(), Value::String(note));
    }
    (out, size)
}

fn object_or_empty(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object).cloned().unwrap_or_default()
}

/// The outputs of one cell as they build up.
#[derive(Debug)]
pub struct OutputCollector {
    limits: OutputLimits,
    outputs: Vec<Value>,
    /// Kept bytes per output, parallel to `outputs`.
    sizes: Vec<usize>,
    /// Bytes a stream output lost to a cap, shown as a marker when the cell ends.
    omitted: Vec<usize>,
    /// Kept bytes of all outputs.
    total: usize,
    /// Bytes of whole outputs dropped because the cell's cap was reached.
    dropped: usize,
    /// `clear_output(wait=True)`: clear when the next output arrives.
    clear_pending: bool,
    /// display_id -> indexes of the outputs it names (for update_display_data).
    display_ids: HashMap<String, Vec<usize>>,
}

impl OutputCollector {
    pub fn new(limits: OutputLimits) -> Self {
        OutputCollector {
            limits,
            outputs: Vec::new(),
            sizes: Vec::new(),
            omitted: Vec::new(),
            total: 0,
            dropped: 0,
            clear_pending: false,
            display_ids: HashMap::new(),
        }
    }

    fn room(&self) -> usize {
        self.limits.per_cell.saturating_sub(self.total)
    }

    fn clear(&mut self) {
        self.outputs.clear();
        self.sizes.clear();
        self.omitted.clear();
        self.display_ids.clear();
        self.total = 0;
        self.dropped = 0;
        self.clear_pending = false;
    }

    fn before_output(&mut self) {
        if self.clear_pending {
            self.clear();
        }
    }

    fn push(&mut self, output: Value, size: usize) {
        self.outputs.push(output);
        self.sizes.push(size);
        self.omitted.push(0);
        self.total += size;
    }

    /// Folds in one iopub message of the cell. Returns the output (or stream fragment) to show
    /// live, if anything was kept.
    pub fn handle(&mut self, msg_type: &str, content: &Value) -> Option<Value> {
        match msg_type {
            "stream" => {
                let name = content.get("name").and_then(Value::as_str).unwrap_or("stdout");
                let text = content.get("text").and_then(joined_text)?;
                self.stream(name, &text)
            }
            "display_data" | "execute_result" => self.rich(msg_type, content),
            "update_display_data" => self.update_display(content),
            "error" => Some(self.error(content)),
            "clear_output" => {
                if content.get("wait").and_then(Value::as_bool).unwrap_or(false) {
                    self.clear_pending = true;
                } else {
                    self.clear();
                }
                None
            }
            _ => None,
        }
    }

    fn stream(&mut self, name: &str, text: &str) -> Option<Value> {
        self.before_output();
        let last_same = self.outputs.last().is_some_and(|o| {
            o.get("output_type").and_then(Value::as_str) == Some("stream")
                && o.get("name").and_then(Value::as_str) == Some(name)
        });
        if last_same {
            let i = self.outputs.len() - 1;
            let room = self.limits.per_output.saturating_sub(self.sizes[i]).min(self.room());
            let kept = prefix(text, room);
            self.omitted[i] += text.len() - kept.len();
            if kept.is_empty() {
                return None;
            }
            if let Some(Value::String(s)) = self.outputs[i].get_mut("text") {
                s.push_str(kept);
            }
            self.sizes[i] += kept.len();
            self.total += kept.len();
            return Some(json!({"output_type": "stream", "name": name, "text": kept}));
        }
        let room = self.limits.per_output.min(self.room());
        if room == 0 {
            self.dropped += text.len();
            return None;
        }
        let kept = prefix(text, room);
        self.push(json!({"output_type": "stream", "name": name, "text": kept}), kept.len());
        let i = self.outputs.len() - 1;
        self.omitted[i] = text.len() - kept.len();
        Some(self.outputs[i].clone())
    }

    fn rich(&mut self, output_type: &str, content: &Value) -> Option<Value> {
        self.before_output();
        let (data, size) = cap_bundle(&object_or_empty(content.get("data")), self.limits.per_output);
        if size > self.room() {
            self.dropped += size;
            return None;
        }
        let metadata = object_or_empty(content.get("metadata"));
        let output = if output_type == "execute_result" {
            let count = content.get("execution_count").cloned().filter(Value::is_u64).unwrap_or(Value::Null);
            json!({"output_type": "execute_result", "execution_count": count, "data": data, "metadata": metadata})
        } else {
            json!({"output_type": "display_data", "data": data, "metadata": metadata})
        };
        self.push(output, size);
        let i = self.outputs.len() - 1;
        if let Some(id) = content.pointer("/transient/display_id").and_then(Value::as_str) {
            self.display_ids.entry(id.to_string()).or_default().push(i);
        }
        Some(self.outputs[i].clone())
    }

    fn update_display(&mut self, content: &Value) -> Option<Value> {
        let id = content.pointer("/transient/display_id").and_then(Value::as_str)?;
        let targets = self.display_ids.get(id)?.clone();
        let (data, size) = cap_bundle(&object_or_empty(content.get("data")), self.limits.per_output);
        let metadata = object_or_empty(content.get("metadata"));
        let mut shown = None;
        for i in targets {
            let grown = size.saturating_sub(self.sizes[i]);
            if grown > self.room() {
                // Keeping the previous display is better than exceeding the cap.
                self.dropped += size;
                continue;
            }
            if let Some(o) = self.outputs[i].as_object_mut() {
                o.insert("data".to_string(), Value::Object(data.clone()));
                o.insert("metadata".to_string(), Value::Object(metadata.clone()));
            }
            self.total = self.total - self.sizes[i] + size;
            self.sizes[i] = size;
            shown = Some(self.outputs[i].clone());
        }
        shown
    }

    fn error(&mut self, content: &Value) -> Value {
        self.before_output();
        let max = self.limits.per_output;
        let ename = cap_string(content.get("ename").and_then(Value::as_str).unwrap_or("Error"), max);
        let evalue = cap_string(content.get("evalue").and_then(Value::as_str).unwrap_or_default(), max);
        let traceback: Vec<String> = content
            .get("traceback")
            .and_then(Value::as_array)
            .map(|lines| lines.iter().filter_map(Value::as_str).map(|l| cap_string(l, max)).collect())
            .unwrap_or_default();
        let size = ename.len() + evalue.len() + traceback.iter().map(String::len).sum::<usize>();
        // An error is the reason a cell failed: it is kept even past the cell's cap.
        let output = json!({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": traceback});
        self.push(output.clone(), size);
        output
    }

    /// Kept bytes so far.
    pub fn total_bytes(&self) -> usize {
        self.total
    }

    /// The outputs with their truncation markers.
    pub fn finish(mut self) -> Vec<Value> {
        for (output, omitted) in self.outputs.iter_mut().zip(&self.omitted) {
            if *omitted > 0
                && let Some(Value::String(s)) = output.get_mut("text")
            {
                s.push_str(&truncation_marker(*omitted));
            }
        }
        if self.dropped > 0 {
            let marker = truncation_marker(self.dropped);
            let last_stderr = self.outputs.last_mut().filter(|o| {
                o.get("output_type").and_then(Value::as_str) == Some("stream")
                    && o.get("name").and_then(Value::as_str) == Some("stderr")
            });
            match last_stderr.and_then(|o| o.get_mut("text")) {
                Some(Value::String(s)) => s.push_str(&marker),
                _ => self.outputs.push(json!({"output_type": "stream", "name": "stderr", "text": marker})),
            }
        }
        self.outputs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> OutputLimits {
        OutputLimits { per_output: 10, per_cell: 25 }
    }

    #[test]
    fn streams_merge_per_name_in_order() {
        let mut c = OutputCollector::new(OutputLimits::default());
        c.handle("stream", &json!({"name": "stdout", "text": "a\n"}));
        c.handle("stream", &json!({"name": "stdout", "text": "b\n"}));
        c.handle("stream", &json!({"name": "stderr", "text": "e\n"}));
        c.handle("stream", &json!({"name": "stdout", "text": "c\n"}));
        let out = c.finish();
        assert_eq!(
            out,
            vec![
                json!({"output_type": "stream", "name": "stdout", "text": "a\nb\n"}),
                json!({"output_type": "stream", "name": "stderr", "text": "e\n"}),
                json!({"output_type": "stream", "name": "stdout", "text": "c\n"}),
            ]
        );
    }

    #[test]
    fn stream_is_capped_with_a_marker() {
        let mut c = OutputCollector::new(small());
        c.handle("stream", &json!({"name": "stdout", "text": "0123456"}));
        c.handle("stream", &json!({"name": "stdout", "text": "789abcdef"}));
        let out = c.finish();
        assert_eq!(out[0]["text"], format!("0123456789{}", truncation_marker(6)));
    }

    #[test]
    fn cell_cap_drops_and_counts() {
        let mut c = OutputCollector::new(small());
        c.handle("stream", &json!({"name": "stdout", "text": "0123456789"}));
        c.handle("stream", &json!({"name": "stderr", "text": "0123456789"}));
        c.handle("display_data", &json!({"data": {"text/plain": "0123456789"}, "metadata": {}}));
        c.handle("stream", &json!({"name": "stdout", "text": "0123456789"}));
        let out = c.finish();
        assert_eq!(out.len(), 4);
        assert_eq!(out[1]["text"], "0123456789");
        assert_eq!(out[2]["text"], format!("01234{}", truncation_marker(5)));
        assert_eq!(out[3], json!({"output_type": "stream", "name": "stderr", "text": truncation_marker(10)}));
    }

    #[test]
    fn char_boundaries_are_respected() {
        let mut c = OutputCollector::new(OutputLimits { per_output: 5, per_cell: 100 });
        c.handle("stream", &json!({"name": "stdout", "text": "ééé"}));
        let out = c.finish();
        assert_eq!(out[0]["text"], format!("éé{}", truncation_marker(2)));
    }

    #[test]
    fn rich_output_strips_transient_and_caps_binary_whole() {
        let mut c = OutputCollector::new(OutputLimits { per_output: 10, per_cell: 1000 });
        let shown = c.handle(
            "display_data",
            &json!({"data": {"text/plain": "x", "image/png": "AAAAAAAAAAAAAAAA"}, "metadata": {}, "transient": {"display_id": "d"}}),
        );
        let shown = shown.unwrap();
        assert!(shown.get("transient").is_none());
        assert!(shown["data"].get("image/png").is_none());
        assert!(shown["data"]["text/plain"].as_str().unwrap().contains("image/png output omitted by cairn"));
    }

    #[test]
    fn update_display_replaces_in_place() {
        let mut c = OutputCollector::new(OutputLimits::default());
        c.handle(
            "display_data",
            &json!({"data": {"text/plain": "1"}, "metadata": {}, "transient": {"display_id": "d"}}),
        );
        c.handle("stream", &json!({"name": "stdout", "text": "s"}));
        c.handle(
            "update_display_data",
            &json!({"data": {"text/plain": "2"}, "metadata": {}, "transient": {"display_id": "d"}}),
        );
        let out = c.finish();
        assert_eq!(out[0]["data"]["text/plain"], "2");
        assert_eq!(out.len(), 2);
    }

    /// Found by the fuzzer (`fuzz/fuzz_targets/notebook.rs`): a display whose `text/plain` was
    /// `null` (or any non-text value of a non-JSON mime type) was kept as it was, and the
    /// notebook did not validate; JSON mime types keep any value.
    #[test]
    fn a_non_text_value_of_a_text_mime_type_is_kept_as_its_json_text() {
        let mut c = OutputCollector::new(OutputLimits::default());
        let data = json!({"text/plain": null, "image/png": 5, "application/json": {"a": [1]},
                          "application/vnd.x+json": 2, "text/html": ["<b>", "x</b>"]});
        c.handle("display_data", &json!({"data": data, "metadata": {}}));
        let out = c.finish();
        assert_eq!(
            out[0]["data"],
            json!({"text/plain": "null", "image/png": "5", "application/json": {"a": [1]},
                   "application/vnd.x+json": 2, "text/html": "<b>x</b>"})
        );
    }

    #[test]
    fn clear_output_wait_clears_on_next() {
        let mut c = OutputCollector::new(OutputLimits::default());
        c.handle("stream", &json!({"name": "stdout", "text": "a"}));
        c.handle("clear_output", &json!({"wait": true}));
        c.handle("stream", &json!({"name": "stdout", "text": "b"}));
        let out = c.finish();
        assert_eq!(out, vec![json!({"output_type": "stream", "name": "stdout", "text": "b"})]);
    }

    #[test]
    fn execute_result_and_error_shapes() {
        let mut c = OutputCollector::new(OutputLimits::default());
        c.handle("execute_result", &json!({"execution_count": 3, "data": {"text/plain": ["a", "b"]}, "metadata": {}}));
        c.handle("error", &json!({"ename": "E", "evalue": "v", "traceback": ["t1", 5]}));
        let out = c.finish();
        assert_eq!(
            out[0],
            json!({"output_type": "execute_result", "execution_count": 3, "data": {"text/plain": "ab"}, "metadata": {}})
        );
        assert_eq!(out[1], json!({"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["t1"]}));
    }

    #[test]
    fn malformed_content_never_panics() {
        let mut c = OutputCollector::new(small());
        for t in ["stream", "display_data", "execute_result", "update_display_data", "error", "clear_output", "x"] {
            for content in [json!(null), json!(5), json!({"data": 3, "text": {}, "transient": 1}), json!([])] {
                c.handle(t, &content);
            }
        }
        let _ = c.finish();
    }
}
