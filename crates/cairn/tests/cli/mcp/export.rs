//! `export_run` on the workbench and the app: the run's zipped Provenance Run Crate written under
//! the daemon's state root and named in the answer, the object `GET /runs/{id}/export` gives; an
//! unknown run is an error result naming it.

use super::*;

#[test]
fn export_run_writes_the_crate_under_the_state_root_and_names_it_on_both_servers() {
    let Some(fx) = Fx::with_example() else { return };
    let input = example("inputs/ready.json");
    let (code, run, out) =
        fx.json(&["run", "release-validation", "--input", input.to_str().unwrap(), "--run-id", "M1"]);
    assert_eq!((code, run["status"].as_str()), (0, Some("READY")), "{out}");
    let client = fx.client();
    let kept = fx.home().join("exports/run-M1.ro-crate.zip");
    let app = client.stdio("app");
    let done = app.call_ok("export_run", json!({"run_id": "M1"}));
    assert_eq!(done["path"], kept.display().to_string(), "{done:#}");
    assert_eq!(done["bytes"], std::fs::metadata(&kept).unwrap().len(), "{done:#}");
    assert!(done["artifacts"].as_u64().unwrap() > 0, "the artifacts are copied in: {done:#}");
    let dir = fx.p("M1.unzipped");
    crate::rocrate::unzip(&kept, &dir);
    crate::rocrate::assert_valid(&fx.c, &dir);

    let wb = client.stdio("workbench");
    let bare = wb.call_ok("export_run", json!({"run_id": "M1", "data": false}));
    assert_eq!((bare["path"].as_str(), bare["artifacts"].as_u64()), (done["path"].as_str(), Some(0)), "{bare:#}");
    let (url, viewer) = (fx.url(), fx.token("viewer"));
    let api = http("GET", &format!("{url}/runs/M1/export?data=false"), Some(&viewer), None, &[]);
    let mut a = api.body.clone();
    let mut b = bare.clone();
    // Two exports, two sizes maybe (each says when it was made); the rest is the same object.
    a.as_object_mut().unwrap().remove("bytes");
    b.as_object_mut().unwrap().remove("bytes");
    assert_eq!(a, b, "export_run is GET /runs/{{id}}/export");

    let e = app.call_err("export_run", json!({"run_id": "nope"}));
    assert!(e.to_string().contains("nope"), "{e:#}");
}
