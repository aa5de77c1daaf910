//! `read_artifact` on the workbench and the app: a bounded slice of an artifact's bytes where it
//! lies, text as text and other bytes as base64, paged by offset, with the recorded size and
//! SHA-256; the object `GET /runs/{id}/steps/{step}/artifacts/{name}` gives; a folder output
//! needs the file's path; an unknown name is an error result naming the step's artifacts.

use super::*;

#[test]
fn read_artifact_pages_an_artifact_where_it_lies_on_both_servers() {
    use base64::Engine as _;
    let Some(fx) = Fx::new() else { return };
    crate::evidence::evidence_workflow(&fx.c);
    fx.start_daemon();
    let input = crate::evidence::input(&fx.c, crate::evidence::render_files(300_000));
    let run = fx.c.run("evidence", &input, &["--run-id", "A1"]).expect(0).json;
    assert_eq!(run["status"], "READY", "{run:#}");
    let client = fx.client();
    let wb = client.stdio("workbench");
    let recorded =
        |name: &str| crate::evidence::artifacts(&run, "render").into_iter().find(|a| a["name"] == name).unwrap();

    let report = wb.call_ok("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "report"}));
    assert_eq!((report["encoding"].as_str(), report["text"].as_str()), (Some("text"), Some("<h1>release 2.4.1</h1>")));
    let r = recorded("report");
    assert_eq!((&report["sha256"], &report["size"], &report["size_now"]), (&r["sha256"], &r["bytes"], &r["bytes"]));
    assert_eq!((report["eof"].as_bool(), report["target"].as_str()), (Some(true), Some("local")), "{report:#}");
    let app = client.stdio("app");
    assert_eq!(app.call_ok("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "report"})), report);
    let (url, viewer) = (fx.url(), fx.token("viewer"));
    let api = http("GET", &format!("{url}/runs/A1/steps/render/artifacts/report"), Some(&viewer), None, &[]);
    assert_eq!(api.body, report, "read_artifact is GET /runs/{{id}}/steps/{{step}}/artifacts/{{name}}");
    let (code, cli, out) = fx.json(&["read-artifact", "A1", "render", "report"]);
    assert_eq!((code, &cli), (0, &report), "read_artifact is `cairn read-artifact --json`: {out}");
    let raw =
        fx.command(&["read-artifact", "A1", "render", "data", "--offset", "10", "--length", "7"]).output().unwrap();
    assert_eq!((raw.status.code(), raw.stdout.as_slice()), (Some(0), &[0u8; 7][..]), "the bytes themselves on stdout");

    // 300,000 zero bytes: base64, in two pages (180 KiB a call over MCP, so the answer stays
    // under 256 KiB).
    let first = wb.call_ok("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "data"}));
    assert_eq!(
        (first["encoding"].as_str(), first["length"].as_u64(), first["eof"].as_bool()),
        (Some("base64"), Some(184_320), Some(false))
    );
    let rest =
        wb.call_ok("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "data", "offset": 184_320}));
    assert_eq!((rest["length"].as_u64(), rest["eof"].as_bool()), (Some(300_000 - 184_320), Some(true)), "{rest:#}");
    let decode = |v: &Value| base64::engine::general_purpose::STANDARD.decode(str_of(&v["base64"])).unwrap();
    let mut bytes = decode(&first);
    bytes.extend(decode(&rest));
    assert_eq!(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)), str_of(&recorded("data")["sha256"]));
    let short = wb.call_ok(
        "read_artifact",
        json!({"run_id": "A1", "step_id": "render", "name": "data", "length": 10, "offset": 5}),
    );
    assert_eq!((short["length"].as_u64(), short["offset"].as_u64()), (Some(10), Some(5)));

    // A folder output needs the file's path.
    let e = wb.call_err("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "plots"}));
    assert!(e.to_string().contains("path"), "{e:#}");
    let one = wb
        .call_ok("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "plots", "path": "latency.png"}));
    assert_eq!(one["text"], "latency");
    assert_eq!(one["path"], "steps/render/plots/latency.png");
    let e = wb.call_err("read_artifact", json!({"run_id": "A1", "step_id": "render", "name": "nope"}));
    assert_eq!((e["status"].as_u64(), e["code"].as_str()), (Some(404), Some("artifact_not_found")), "{e:#}");
    assert!(e["message"].as_str().unwrap().contains("report"), "names the step's artifacts: {e:#}");
}
