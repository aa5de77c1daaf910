//! Who may do what: names, permission lists, grants and the decision every surface asks for.
//!
//! The input up to its first NUL byte is read as a principal's name, as a permission list and as
//! a grant (JSON): a name is accepted exactly when it is 1 to 64 of a-z 0-9 . _ - starting with a
//! letter or a digit, and never when reserved; a permission list parses exactly when each of its
//! items is a permission. The bytes after it drive a generator of grants (built-in and custom
//! roles, scoped or not) and resources: a decision allows a permission exactly when one grant
//! holds it and covers the resource, a scoped grant never covers a resource that does not name
//! its workflow and target, a refusal names who and what is missing, the owner is allowed
//! everything, and the two-person rule refuses exactly the planner (and an unknown one).
#![no_main]

use std::collections::BTreeSet;

use arbitrary::{Result, Unstructured};
use cairn_core::access::{
    Access, Grant, OWNER, Permission, Policy, Role, Scope, VIEWER, access_of, builtin_roles, check_name,
    check_two_person, parse_permissions,
};
use cairn_fuzz::split_input;
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 4] = ["rnaseq", "hpc", "local", "x"];

fuzz_target!(|data: &[u8]| {
    let (text, rest) = split_input(data);
    names(&text);
    permission_lists(&text);
    let _ = serde_json::from_str::<Grant>(&text);
    let _ = serde_json::from_str::<Scope>(&text);
    let _ = decisions(&mut Unstructured::new(rest));
});

fn names(text: &str) {
    let valid = !text.is_empty()
        && text.len() <= 64
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
        && text.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
    assert_eq!(check_name(text, &[]).is_ok(), valid, "{text:?}");
    if text == OWNER || text == VIEWER {
        assert!(check_name(text, &[OWNER, VIEWER]).is_err());
    }
}

fn permission_lists(text: &str) {
    let items: Vec<&str> = text.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
    let all_known = !items.is_empty() && items.iter().all(|p| Permission::parse(p).is_some());
    match parse_permissions(text) {
        Ok(set) => {
            assert!(all_known, "{text:?} parsed");
            assert_eq!(set, items.iter().filter_map(|p| Permission::parse(p)).collect::<BTreeSet<_>>());
        }
        Err(message) => {
            assert!(!all_known, "{text:?} refused: {message}");
            assert!(!message.is_empty());
        }
    }
}

fn name_or_none(u: &mut Unstructured<'_>) -> Result<Option<String>> {
    Ok(if u.ratio(1, 2)? { Some(u.choose(&NAMES)?.to_string()) } else { None })
}

fn decisions(u: &mut Unstructured<'_>) -> Result<()> {
    let custom: Vec<Role> = (0..u.int_in_range(0..=2)?)
        .map(|i| -> Result<Role> {
            let mut permissions = BTreeSet::new();
            for p in Permission::ALL {
                if u.ratio(1, 3)? {
                    permissions.insert(p);
                }
            }
            Ok(Role { name: format!("custom{i}"), permissions, builtin: false })
        })
        .collect::<Result<_>>()?;
    let mut role_names: Vec<String> = builtin_roles().into_iter().map(|r| r.name).collect();
    role_names.extend(custom.iter().map(|r| r.name.clone()));
    role_names.push("gone".into());
    let grants: Vec<Grant> = (0..u.int_in_range(0..=4)?)
        .map(|_| -> Result<Grant> {
            Ok(Grant {
                principal: "p".into(),
                role: u.choose(&role_names)?.clone(),
                scope: Scope { workflow: name_or_none(u)?, target: name_or_none(u)? },
                created_at: 0,
            })
        })
        .collect::<Result<_>>()?;
    let access = access_of("p", &grants, &custom);
    let role_of = |name: &str| builtin_roles().into_iter().chain(custom.iter().cloned()).find(|r| r.name == name);
    for _ in 0..u.int_in_range(1..=6)? {
        let permission = *u.choose(&Permission::ALL)?;
        let resource = Scope { workflow: name_or_none(u)?, target: name_or_none(u)? };
        let expected = grants.iter().any(|g| {
            let fits = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
            role_of(&g.role).is_some_and(|r| r.permissions.contains(&permission))
                && fits(&g.scope.workflow, &resource.workflow)
                && fits(&g.scope.target, &resource.target)
        });
        assert_eq!(access.allows(permission, &resource), expected, "{permission} on {resource:?} with {grants:?}");
        match access.check(permission, &resource) {
            Ok(()) => assert!(expected),
            Err(denied) => {
                let text = denied.to_string();
                assert!(text.contains("p may not") && text.contains(permission.as_str()), "{text}");
            }
        }
        assert!(Access::owner().allows(permission, &resource));
        if !access.may_change_anything() {
            assert!(permission == Permission::Read || !access.allows(permission, &resource));
        }
    }
    let planner = name_or_none(u)?;
    let approver = u.choose(&NAMES)?.to_string();
    let on = Policy { workflow: "w".into(), two_person: u.arbitrary()?, updated_at: 0 };
    let refused = check_two_person(Some(&on), "plan", planner.as_deref(), &approver).is_err();
    assert_eq!(refused, on.two_person && planner.as_deref().is_none_or(|p| p == approver));
    Ok(())
}
