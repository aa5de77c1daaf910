//! The run input, checked before anything is created: exact numbers, the workflow's input schema,
//! and every `${input…}` the steps reference.

use cairn_core::canonical::check_exact_numbers;
use cairn_core::template::{self, Root};
use serde_json::Value;

use crate::EngineError;
use crate::registry::LoadedWorkflow;

/// Validates the input against the schema and checks that every `${input…}` resolves, so a bad
/// input is refused before anything is created.
pub fn check_input(wf: &LoadedWorkflow, input: &Value) -> Result<(), EngineError> {
    check_exact_numbers(input, &mut String::new()).map_err(|e| EngineError::input(format!("run input: {e}")))?;
    if let Some(schema) = &wf.schema {
        let errors: Vec<String> = schema
            .iter_errors(input)
            .take(10)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("  at `{}`: {e}", if at.is_empty() { "/" } else { &at })
            })
            .collect();
        if !errors.is_empty() {
            return Err(EngineError::input(format!(
                "the run input does not match the input schema of {} ({}):\n{}",
                wf.spec().reference(),
                wf.spec().input_schema.as_deref().unwrap_or(""),
                errors.join("\n")
            )));
        }
    }
    for step in &wf.spec().steps {
        let refs = template::references(&step.args)
            .map_err(|e| EngineError::internal(format!("step `{}` of a registered workflow: {e}", step.id)))?;
        for (pointer, r) in refs {
            if r.root == Root::Input
                && let Err(missing) = template::lookup(input, &r.path)
            {
                return Err(EngineError::input(format!(
                    "the run input lacks a field step `{}` needs: `${{{}}}` (args at `{pointer}`): {missing}",
                    step.id, r.text
                )));
            }
        }
    }
    Ok(())
}
