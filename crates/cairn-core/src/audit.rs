//! The session kernel's audit notebook: every retained job in order, dead ends included, each
//! preceded by a provenance header saying what it was, where it ran and how it ended. It records
//! what happened; unlike a verified workflow notebook it proves nothing about re-running.

use serde_json::{Value, json};

use crate::store::{KernelJob, KernelJobStatus};
use crate::verification::{lines, notebook};

/// Builds the audit notebook (nbformat 4.5, deterministic cell ids). `time` formats a timestamp
/// in milliseconds since the epoch.
pub fn audit_notebook(jobs: &[KernelJob], time: &dyn Fn(i64) -> String) -> Value {
    let sessions = {
        let mut seen: Vec<&str> = Vec::new();
        for j in jobs {
            if !seen.contains(&j.session.as_str()) {
                seen.push(&j.session);
            }
        }
        seen.len()
    };
    let failed = jobs.iter().filter(|j| j.status != KernelJobStatus::Ok).count();
    let intro = format!(
        "# Session kernel audit\n\n\
         Every retained job of the session kernel, in the order submitted: {} job(s) in {sessions} kernel session(s), \
         {failed} of them not `ok` (dead ends are kept).\n\n\
         **What this shows:** the code that was run, what it printed, and how each job ended, as Cairn recorded it.\n\n\
         **What it does not show:** that running these cells again gives the same results, or in this order without \
         error — state carried between jobs, restarts and interrupted jobs make that unknown. \
         To prove a workflow, write it as a document and run `cairn verify`.\n",
        jobs.len()
    );
    let mut cells = vec![json!({
        "id": "cairn-audit", "cell_type": "markdown", "metadata": {"cairn": {"role": "audit"}}, "source": lines(&intro)
    })];
    for (i, j) in jobs.iter().enumerate() {
        let mut header = format!(
            "**Job `{}`** — status `{}` · session `{}` · submitted {}",
            j.job_id,
            j.status,
            j.session,
            time(j.submitted_at)
        );
        if let Some(s) = j.started_at {
            header.push_str(&format!(" · started {}", time(s)));
        }
        if let Some(ms) = j.duration_ms {
            header.push_str(&format!(" · {ms} ms"));
        }
        if let Some(e) = &j.error {
            header.push_str(&format!("\n\n> {}", e.replace('\n', "\n> ")));
        }
        cells.push(json!({
            "id": format!("job-{i}-header"), "cell_type": "markdown",
            "metadata": {"cairn": {"role": "job-header", "job_id": j.job_id}}, "source": lines(&header)
        }));
        cells.push(json!({
            "id": format!("job-{i}"),
            "cell_type": "code",
            "execution_count": j.execution_count,
            "metadata": {"cairn": {"job_id": j.job_id, "status": j.status, "session": j.session, "duration_ms": j.duration_ms}},
            "outputs": j.outputs,
            "source": lines(&j.code),
        }));
    }
    notebook(cells, json!({"role": "session-audit", "jobs": jobs.len()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, status: KernelJobStatus, session: &str) -> KernelJob {
        KernelJob {
            job_id: id.into(),
            session: session.into(),
            code: "x = 1\nprint(x)".into(),
            status,
            outputs: vec![json!({"output_type": "stream", "name": "stdout", "text": "1\n"})],
            execution_count: Some(1),
            error: (status != KernelJobStatus::Ok).then(|| "NameError: y".to_string()),
            submitted_at: 0,
            started_at: Some(1),
            finished_at: Some(2),
            duration_ms: Some(1),
        }
    }

    #[test]
    fn every_job_is_kept_in_order_with_a_header() {
        let jobs = [
            job("job_a", KernelJobStatus::Ok, "s1"),
            job("job_b", KernelJobStatus::Error, "s1"),
            job("job_c", KernelJobStatus::Ok, "s2"),
        ];
        let nb = audit_notebook(&jobs, &|ms| format!("t{ms}"));
        let cells = nb["cells"].as_array().unwrap();
        assert_eq!(cells.len(), 1 + 2 * jobs.len());
        let code: Vec<&str> = cells
            .iter()
            .filter(|c| c["cell_type"] == "code")
            .map(|c| c["metadata"]["cairn"]["job_id"].as_str().unwrap())
            .collect();
        assert_eq!(code, ["job_a", "job_b", "job_c"]);
        assert!(cells[0]["source"].to_string().contains("2 kernel session(s)"));
        assert!(cells[0]["source"].to_string().contains("1 of them not `ok`"));
        assert!(cells[3]["source"].to_string().contains("status `error`"), "{}", cells[3]);
        assert!(cells[3]["source"].to_string().contains("NameError"));
        let ids: std::collections::HashSet<&str> = cells.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), cells.len(), "cell ids are unique");
        assert_eq!((nb["nbformat"].as_u64(), nb["nbformat_minor"].as_u64()), (Some(4), Some(5)));
    }
}
