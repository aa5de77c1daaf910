//! Bearer tokens for the two roles, kept in `<state>/auth/` with mode 0600, and the request
//! checks: a loopback `Host` (DNS-rebinding protection) and a token of the needed role.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::Failure;

/// Who a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Reads everything, changes nothing.
    Viewer,
    /// Also submits, cancels and drives the session kernel.
    Operator,
}

#[derive(Clone)]
pub struct Tokens {
    pub viewer: String,
    pub operator: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokens(..)")
    }
}

impl Tokens {
    /// The access a state root's own token file gives: its owner's (every permission) for the
    /// operator token, read for the viewer token; `None` for any other token.
    pub fn access_of(&self, presented: &str) -> Option<cairn_core::access::Access> {
        self.role_of(presented).map(|role| match role {
            Role::Operator => cairn_core::access::Access::owner(),
            Role::Viewer => cairn_core::access::Access::viewer(),
        })
    }

    /// The role a presented token grants, compared in constant time.
    pub fn role_of(&self, presented: &str) -> Option<Role> {
        if constant_time_eq(presented.as_bytes(), self.operator.as_bytes()) {
            Some(Role::Operator)
        } else if constant_time_eq(presented.as_bytes(), self.viewer.as_bytes()) {
            Some(Role::Viewer)
        } else {
            None
        }
    }
}

/// How long a login link of `cairn ui` may be used: long enough to click, short enough that one
/// found later in a terminal's scrollback or a browser's history is dead.
pub const LOGIN_LIFETIME_MS: i64 = 120_000;

/// Why a login code was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum LoginRefused {
    Malformed,
    Forged,
    Expired,
}

impl std::fmt::Display for LoginRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LoginRefused::Malformed => "the login code is malformed; run `cairn ui` for a new login link",
            LoginRefused::Forged => "the login code was not made by this daemon's `cairn ui`; run it for a new link",
            LoginRefused::Expired => "the login link expired (they last two minutes); run `cairn ui` for a new one",
        })
    }
}

/// A login code for the web app: `EXPIRES.NONCE.MAC`, where the MAC is an HMAC-SHA256 keyed with
/// the Viewer token. Whoever can read the Viewer token can make one, which is exactly who may
/// read: so `cairn ui` makes it without asking the daemon, and the daemon stores nothing until
/// the code is used (then only its nonce, so it works once).
pub fn login_code(viewer: &str, now_ms: i64) -> (String, i64) {
    let expires = now_ms + LOGIN_LIFETIME_MS;
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let mac = hex::encode(login_mac(viewer, expires, &nonce).finalize().into_bytes());
    (format!("{expires}.{nonce}.{mac}"), expires)
}

/// Checks a login code; its nonce and expiry (for the daemon's single-use memory) if it is good.
pub fn check_login_code(viewer: &str, code: &str, now_ms: i64) -> Result<(String, i64), LoginRefused> {
    let mut parts = code.trim().splitn(3, '.');
    let (Some(expires), Some(nonce), Some(mac)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(LoginRefused::Malformed);
    };
    let expires: i64 = expires.parse().map_err(|_| LoginRefused::Malformed)?;
    let given = hex::decode(mac).map_err(|_| LoginRefused::Malformed)?;
    if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(LoginRefused::Malformed);
    }
    login_mac(viewer, expires, nonce).verify_slice(&given).map_err(|_| LoginRefused::Forged)?;
    // A code dated further ahead than any `cairn ui` makes is refused too: it would outlive the
    // two minutes.
    if now_ms > expires || expires - now_ms > LOGIN_LIFETIME_MS + 5_000 {
        return Err(LoginRefused::Expired);
    }
    Ok((nonce.to_string(), expires))
}

fn login_mac(viewer: &str, expires: i64, nonce: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(viewer.as_bytes()).expect("HMAC accepts any key length");
    mac.update(format!("cairn-ui-login\0{expires}\0{nonce}").as_bytes());
    mac
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub fn auth_dir(root: &Path) -> PathBuf {
    root.join("auth")
}

pub fn token_path(root: &Path, role: Role) -> PathBuf {
    auth_dir(root).join(match role {
        Role::Viewer => "viewer.token",
        Role::Operator => "operator.token",
    })
}

/// Reads the role's token; `None` when it does not exist yet (no daemon ever started here).
pub fn read_token(root: &Path, role: Role) -> Result<Option<String>, Failure> {
    let path = token_path(root, role);
    match std::fs::read_to_string(&path) {
        Ok(t) => Ok(Some(t.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::usage(format!("cannot read {}: {e}", path.display()))),
    }
}

/// Creates the tokens at first start (256 random bits each, files of mode 0600 in a 0700
/// directory) and returns them; later starts reuse them, tightening modes that were loosened.
pub fn ensure_tokens(root: &Path) -> Result<Tokens, Failure> {
    let dir = auth_dir(root);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Failure::usage(format!("cannot create {}: {e}", dir.display())))?;
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    let get = |role| -> Result<String, Failure> {
        let path = token_path(root, role);
        if let Some(t) = read_token(root, role)?.filter(|t| t.len() >= 32) {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            return Ok(t);
        }
        let token = new_token();
        let tmp = path.with_extension("tmp");
        let _ = std::fs::remove_file(&tmp);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(token.as_bytes())?;
                f.write_all(b"\n")?;
                f.sync_all()
            })
            .and_then(|_| std::fs::rename(&tmp, &path));
        written.map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?;
        Ok(token)
    };
    Ok(Tokens { viewer: get(Role::Viewer)?, operator: get(Role::Operator)? })
}

/// 256 bits from the OS's random source (two UUIDv4s carry 244 of them; a third tops it up).
pub(crate) fn new_token() -> String {
    format!(
        "{}{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme is case-insensitive, RFC 9110
/// §11.1); `None` for no header or another scheme.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// Whether a `Host` header names this machine's loopback: `127.0.0.1`, `localhost` or `[::1]`,
/// with or without a port. Anything else (a DNS name that resolves here) is refused.
pub fn host_is_loopback(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, port)) if port.is_empty() || port.starts_with(':') => return inner == "::1" && port_ok(port),
            _ => return false,
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) if port_ok(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        }
    };
    name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1"
}

fn port_ok(port: &str) -> bool {
    port.is_empty() || port.strip_prefix(':').is_some_and(|p| !p.is_empty() && p.parse::<u16>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_pass() {
        for ok in ["127.0.0.1", "127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]", "[::1]:9"] {
            assert!(host_is_loopback(ok), "{ok}");
        }
        for bad in
            ["", "evil.example", "evil.example:80", "127.0.0.1.evil.example", "localhost:x", "[::2]:1", "0.0.0.0"]
        {
            assert!(!host_is_loopback(bad), "{bad}");
        }
    }

    #[test]
    fn login_codes_are_checked_for_forgery_and_age() {
        let viewer = "v".repeat(72);
        let (code, expires) = login_code(&viewer, 1_000_000);
        assert_eq!(expires, 1_000_000 + LOGIN_LIFETIME_MS);
        let (nonce, at) = check_login_code(&viewer, &code, 1_000_001).unwrap();
        assert_eq!((nonce.len(), at), (32, expires));
        assert_eq!(check_login_code(&viewer, &code, expires + 1), Err(LoginRefused::Expired));
        assert_eq!(check_login_code("another token", &code, 1_000_001), Err(LoginRefused::Forged));
        // A later expiry under the same MAC is a forgery, not a longer login.
        let later = code.replacen(&expires.to_string(), &(expires + 1).to_string(), 1);
        assert_eq!(check_login_code(&viewer, &later, 1_000_001), Err(LoginRefused::Forged));
        for bad in ["", "x", "1.2", "1.2.3", "a.0123456789abcdef0123456789abcdef.00", &format!("{expires}.short.00")] {
            assert_eq!(check_login_code(&viewer, bad, 1_000_001), Err(LoginRefused::Malformed), "{bad}");
        }
    }

    #[test]
    fn tokens_are_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure_tokens(dir.path()).unwrap();
        assert_ne!(first.viewer, first.operator);
        assert_eq!(first.viewer.len(), 72);
        for role in [Role::Viewer, Role::Operator] {
            let mode = std::fs::metadata(token_path(dir.path(), role)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let again = ensure_tokens(dir.path()).unwrap();
        assert_eq!((again.viewer, again.operator), (first.viewer.clone(), first.operator.clone()));
        assert_eq!(first.role_of(&first.operator), Some(Role::Operator));
        assert_eq!(first.role_of(&first.viewer), Some(Role::Viewer));
        assert_eq!(first.role_of("nope"), None);
    }
}
