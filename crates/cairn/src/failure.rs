//! How a failure leaves the binary, written once: an error's kind decides the CLI's exit code and
//! the HTTP status, and its code is the wire code, as the engine names it; a failure the daemon answered with maps back to
//! the same exit code the CLI would have given in-process. MCP error results carry the API's
//! answer as it is, so all three surfaces agree.

use axum::http::StatusCode;
use cairn_engine::{EngineError, ErrorCode, ErrorKind};

/// An error at the binary's edge, with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// A usage or input error found by the binary itself (exit 2).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { code: exit_code(ErrorKind::Invalid), message: message.into() }
    }

    /// A failure the daemon answered with: its wire code (or, for one of the API's own codes
    /// such as `unauthorized` or `invalid_json`, or a code this build does not know, its HTTP
    /// status) decides the exit code.
    pub fn of_answer(status: u16, code: &str, message: String) -> Failure {
        let kind = match ErrorCode::parse(code) {
            Some(c) => c.kind(),
            None => match status {
                404 => ErrorKind::NotFound,
                409 => ErrorKind::Conflict,
                500..=599 => ErrorKind::Internal,
                _ => ErrorKind::Invalid,
            },
        };
        Failure { code: exit_code(kind), message }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Failure {
        Failure { code: exit_code(e.kind()), message: e.to_string() }
    }
}

/// The CLI's exit code for a failure of this kind.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Invalid | ErrorKind::NotFound | ErrorKind::Internal => 2,
        ErrorKind::Conflict => 4,
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
