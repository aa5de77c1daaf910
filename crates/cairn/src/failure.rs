//! How a failure leaves the binary, written once: an error's kind decides the CLI's exit code and
//! the HTTP status, and its code is the wire code, as the engine names it; a failure the daemon answered with maps back to
//! the same exit code the CLI would have given in-process. MCP error results carry the API's
//! answer as it is, so all three surfaces agree.

use axum::http::StatusCode;
use cairn_engine::{EngineError, ErrorCode, ErrorKind};

/// An error at the binary's edge: the exit code it maps to, its machine code (the engine's, the
/// API's, or the binary's own) and the sentence for a person. With `--json` it is printed as
/// the one object on stdout, `{"error": {"code", "message"}}`.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: String,
    pub message: String,
}

impl Failure {
    /// A usage or input error found by the binary itself (exit 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::of_kind(ErrorKind::Invalid, "usage", message)
    }

    /// A conflict found by the binary itself (exit 4), such as a daemon lock another holds.
    pub fn conflict(error: &str, message: impl Into<String>) -> Failure {
        Failure::of_kind(ErrorKind::Conflict, error, message)
    }

    /// The person stopped waiting (Ctrl-C; exit 130): what they waited on goes on.
    pub fn detached(message: impl Into<String>) -> Failure {
        Failure::of_kind(ErrorKind::Interrupted, "detached", message)
    }

    /// The environment failed (exit 5): the daemon, the registry or a target cannot be reached.
    pub fn unavailable(error: &str, message: impl Into<String>) -> Failure {
        Failure::of_kind(ErrorKind::Unavailable, error, message)
    }

    fn of_kind(kind: ErrorKind, error: &str, message: impl Into<String>) -> Failure {
        Failure { code: exit_code(kind), error: error.to_string(), message: message.into() }
    }

    /// A failure the daemon answered with: its wire code (or, for one of the API's own codes
    /// such as `unauthorized` or `invalid_json`, or a code this build does not know, its HTTP
    /// status) decides the exit code.
    pub fn of_answer(status: u16, code: &str, message: String) -> Failure {
        let kind = match ErrorCode::parse(code) {
            Some(c) => c.kind(),
            None => match status {
                403 => ErrorKind::Forbidden,
                404 => ErrorKind::NotFound,
                409 => ErrorKind::Conflict,
                429 => ErrorKind::OverQuota,
                502..=504 => ErrorKind::Unavailable,
                500..=599 => ErrorKind::Internal,
                _ => ErrorKind::Invalid,
            },
        };
        let error = if code.is_empty() { format!("http_{status}") } else { code.to_string() };
        Failure { code: exit_code(kind), error, message }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        Failure { code: exit_code(e.kind()), error: e.code().as_str().to_string(), message: e.to_string() }
    }
}

/// The CLI's exit code for a failure of this kind.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Internal | ErrorKind::Forbidden => 2,
        ErrorKind::Conflict | ErrorKind::OverQuota => 4,
        ErrorKind::Unavailable => 5,
        ErrorKind::Interrupted => 130,
    }
}

/// The HTTP status for a failure of this kind.
pub fn http_status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict | ErrorKind::Interrupted => StatusCode::CONFLICT,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::OverQuota => StatusCode::TOO_MANY_REQUESTS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_maps_to_the_exit_code_the_error_has_in_process() {
        for code in ErrorCode::ALL {
            let status = http_status(code.kind()).as_u16();
            let over_http = Failure::of_answer(status, code.as_str(), String::new());
            assert_eq!(over_http.code, exit_code(code.kind()), "{code:?}");
        }
        assert_eq!(Failure::of_answer(401, "unauthorized", String::new()).code, 2);
        assert_eq!(Failure::of_answer(409, "some_future_conflict", String::new()).code, 4);
        assert_eq!(Failure::of_answer(404, "not_found", String::new()).code, 2);
        assert_eq!(Failure::of_answer(409, "run_busy", String::new()).code, 4);
    }
}
