//! The person's approval of `execute_plan`, asked through the MCP client: an elicitation form on
//! 2025-11-25 (`elicitation/create`) and an input request of a multi round-trip call on
//! 2026-07-28 (`InputRequiredResult`), over stdio and streamable HTTP, with the official Python
//! SDK's elicitation callback answering as a person would. The form shows the plan (its
//! workflow, target, run_dir, commands, input files with their hashes, effects) and checksum;
//! only an accept with the confirmation executes, and a decline or cancel creates nothing. The
//! run records how it was approved on every surface. A multi round-trip request state is sealed:
//! altered, for another plan, from another caller or brought back twice, it approves nothing.

use super::*;

/// A daemon (with the test venv's Snakemake on its PATH) and the `bare` Snakemake pipeline
/// registered, and an input file beside it for plans to bind by hash.
fn fixture() -> Option<(Fx, PathBuf)> {
    let fx = Fx::new()?.with_venv_on_path();
    let pipeline = fx.p("bare");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pipelines/bare"), &pipeline);
    let (code, _, out) = fx.json(&["workflow", "add", pipeline.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    std::fs::create_dir_all(fx.p("runs")).unwrap();
    let samples = fx.p("samples.csv");
    std::fs::write(&samples, "sample,reads\nA,1200\nB,900\n").unwrap();
    fx.start_daemon();
    Some((fx, samples))
}

/// A plan of `bare` into runs/NAME, binding the samples file.
fn plan(s: &Session<'_>, fx: &Fx, samples: &Path, name: &str) -> Value {
    s.call_ok(
        "plan_run",
        json!({"workflow": "bare", "input": {"samples": samples}, "target": "local",
               "run_dir": fx.p(&format!("runs/{name}")), "plan_name": name}),
    )
}

fn approve(plan: &Value) -> Value {
    json!({"plan_name": plan["plan_name"], "plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]})
}

/// No run executes this plan, and its run_dir was never created.
#[track_caller]
fn nothing_created(fx: &Fx, plan: &Value, what: &str) {
    let run_dir = PathBuf::from(str_of(&plan["run_dir"]));
    assert!(!run_dir.exists(), "{what}: {} was created", run_dir.display());
    assert!(!fx.runs().iter().any(|r| r["run_dir"] == plan["run_dir"]), "{what}: a run was created");
}

#[test]
fn the_person_approves_through_the_client_and_a_refusal_creates_nothing() {
    let Some((fx, samples)) = fixture() else { return };
    let client = fx.client();
    let data_sha = sha256_hex(&std::fs::read(&samples).unwrap());
    for (over, era) in
        [(Over::Stdio, "legacy"), (Over::Stdio, "modern"), (Over::Http, "legacy"), (Over::Http, "modern")]
    {
        let wb = client.session_with(over, "workbench", "operator", json!({"elicitation": true, "era": era}));
        let w = format!("{} ({era})", wb.what);
        let name = format!("{}-{era}", if over == Over::Stdio { "stdio" } else { "http" });
        let p = plan(&wb, &fx, &samples, &name);
        let rounds = if era == "modern" { 1 } else { 0 };

        for (how, code) in
            [("decline", "approval_declined"), ("cancel", "approval_cancelled"), ("unconfirmed", "approval_declined")]
        {
            let answer = wb.call_seeing("execute_plan", approve(&p), json!({"elicit": how}));
            let r = &answer["ok"];
            assert_eq!(r["isError"], true, "{w}: {how}: {answer:#}");
            let e = &r["structuredContent"]["error"];
            assert_eq!(e["code"], code, "{w}: {how}: {e:#}");
            assert!(str_of(&e["message"]).contains("nothing was created"), "{w}: says so: {e:#}");
            assert_eq!(answer["elicited"].as_array().map(Vec::len), Some(1), "{w}: {how}: asked once: {answer:#}");
            assert_eq!(answer["rounds"], rounds, "{w}: {how}: {answer:#}");
            nothing_created(&fx, &p, &format!("{w}: {how}"));
        }

        let answer = wb.call_seeing("execute_plan", approve(&p), json!({"elicit": "accept"}));
        let form = &answer["elicited"][0];
        assert_eq!(form["mode"], "form", "{w}: {form:#}");
        let message = str_of(&form["message"]);
        for shown in [
            "bare@1.0.0".to_string(),
            "target `local`".into(),
            str_of(&p["run_dir"]).to_string(),
            format!("{} (sha256 {data_sha})", samples.display()),
            str_of(&p["plan_checksum"]).to_string(),
            "deploy_workflow".into(),
        ] {
            assert!(message.contains(&shown), "{w}: the form shows `{shown}`:\n{message}");
        }
        for c in p["commands"].as_array().unwrap() {
            assert!(message.contains(&strs(&c["argv"]).join(" ")), "{w}: the form shows each command:\n{message}");
        }
        let schema = &form["requestedSchema"];
        assert_eq!(
            (&schema["properties"]["confirm"]["type"], &schema["required"]),
            (&json!("boolean"), &json!(["confirm"]))
        );
        assert_eq!(answer["rounds"], rounds, "{w}: {answer:#}");
        let run = &answer["ok"]["structuredContent"];
        assert_eq!(run["status"], "READY", "{w}: {answer:#}");
        let channel = if era == "modern" { "input_required" } else { "elicitation" };
        assert_eq!(run["approval"]["channel"], channel, "{w}: {run:#}");
        let run_id = str_of(&run["run_id"]);
        assert_eq!(wb.call_ok("get_run", json!({"run_id": run_id}))["approval"], run["approval"], "{w}: get_run");
        let (_, shown, out) = fx.json(&["show", run_id]);
        assert_eq!(shown["approval"], run["approval"], "{w}: cairn show --json: {out}");
        let text = fx.command(&["show", run_id]).output().unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains(&format!("[{channel}]")), "{w}: cairn show says how it was approved:\n{text}");
    }
}

#[test]
fn the_host_the_cli_and_the_api_approvals_are_recorded_as_such() {
    let Some((fx, samples)) = fixture() else { return };
    let client = fx.client();
    // A client without the elicitation capability: its host's confirmation is the approval.
    let wb = client.stdio("workbench");
    let p = plan(&wb, &fx, &samples, "host");
    let run = wb.call_ok("execute_plan", approve(&p));
    assert_eq!((run["status"].as_str(), run["approval"]["channel"].as_str()), (Some("READY"), Some("host")), "{run:#}");
    assert!(run["approval"]["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{run:#}");

    let p = plan(&wb, &fx, &samples, "cli");
    let id = str_of(&p["plan_id"]);
    let (code, run, out) = fx.json(&["execute-plan", "cli", "--id", id, "--checksum", str_of(&p["plan_checksum"])]);
    assert_eq!((code, run["approval"]["channel"].as_str()), (0, Some("cli")), "{out}");
    let text = fx.command(&["show", str_of(&run["run_id"])]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("approved with `cairn execute-plan`"), "{text:?}");

    let (url, operator) = (fx.url(), fx.token("operator"));
    let p = plan(&wb, &fx, &samples, "api");
    let execute = format!("{url}/plans/api/execute");
    let mut body = json!({"plan_id": p["plan_id"], "plan_checksum": p["plan_checksum"], "approval": "psychic"});
    let refused = http("POST", &execute, Some(&operator), Some(&body.to_string()), &[]);
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str()),
        (422, Some("invalid_body")),
        "{:#}",
        refused.body
    );
    nothing_created(&fx, &p, "an unknown approval channel");
    body.as_object_mut().unwrap().remove("approval");
    let done = http("POST", &execute, Some(&operator), Some(&body.to_string()), &[]);
    assert_eq!(done.status, 202, "{:#}", done.body);
    assert_eq!(done.body["approval"]["channel"], "api", "a direct API call: {:#}", done.body);
    // A run submitted without a plan was approved by nobody.
    let direct = fx.c.run("bare", &json!({}), &["--run-id", "D1"]).expect(0).json;
    assert_eq!(direct["approval"], Value::Null, "{direct:#}");
}

#[test]
fn an_input_required_state_is_sealed_bound_to_its_caller_and_plan_and_used_once() {
    let Some((fx, samples)) = fixture() else { return };
    let client = fx.client();
    let modern = json!({"elicitation": true, "era": "modern"});
    let wb = client.session_with(Over::Http, "workbench", "operator", modern.clone());
    let p = plan(&wb, &fx, &samples, "sealed");
    let other = plan(&wb, &fx, &samples, "other");
    let raw = |s: &Session<'_>, args: Value, state: Option<&str>, responses: Option<Value>| -> Value {
        s.ok(
            "call_raw",
            json!({"name": "execute_plan", "arguments": args, "request_state": state, "input_responses": responses}),
        )
    };
    let asked = raw(&wb, approve(&p), None, None);
    assert_eq!(asked["resultType"], "input_required", "{asked:#}");
    assert_eq!(asked["inputRequests"]["approval"]["method"], "elicitation/create", "{asked:#}");
    let state = str_of(&asked["requestState"]).to_string();
    let accept = json!({"approval": {"action": "accept", "content": {"confirm": true}}});
    let refused = |r: &Value, why: &str, what: &str| {
        assert_eq!(r["isError"], true, "{what}: {r:#}");
        let e = &r["structuredContent"]["error"];
        assert_eq!(e["code"], "approval_state_refused", "{what}: {e:#}");
        assert!(str_of(&e["message"]).contains(why), "{what}: `{why}`: {e:#}");
        nothing_created(&fx, &p, what);
        nothing_created(&fx, &other, what);
    };

    // Altered by one character: the MAC fails.
    let mut altered = state.clone().into_bytes();
    let at = altered.len() / 3;
    altered[at] = if altered[at] == b'0' { b'1' } else { b'0' };
    let altered = String::from_utf8(altered).unwrap();
    refused(&raw(&wb, approve(&p), Some(&altered), Some(accept.clone())), "MAC", "an altered state");
    // Brought to another plan's call.
    refused(&raw(&wb, approve(&other), Some(&state), Some(accept.clone())), "not the plan named", "another plan");
    // Brought by another caller (a Viewer's session of the same daemon).
    let viewer = client.session_with(Over::Http, "workbench", "viewer", modern);
    refused(&raw(&viewer, approve(&p), Some(&state), Some(accept.clone())), "another caller", "another caller");
    // Without the answer, nothing happens (and the state is spent).
    let r = raw(&wb, approve(&p), Some(&state), None);
    assert_eq!(r["structuredContent"]["error"]["code"], "invalid_arguments", "{r:#}");
    refused(&raw(&wb, approve(&p), Some(&state), Some(accept.clone())), "answered already", "a spent state");

    // A fresh request, answered once: executes, and only once.
    let state = str_of(&raw(&wb, approve(&p), None, None)["requestState"]).to_string();
    let run = raw(&wb, approve(&p), Some(&state), Some(accept.clone()));
    assert_eq!(run["structuredContent"]["status"], "READY", "{run:#}");
    assert_eq!(run["structuredContent"]["approval"]["channel"], "input_required", "{run:#}");
    let again = raw(&wb, approve(&p), Some(&state), Some(accept));
    assert_eq!(again["structuredContent"]["error"]["code"], "approval_state_refused", "{again:#}");
    assert_eq!(fx.runs().len(), 1, "one run");
}
