//! The closed sets of outcomes and statuses, with the text forms stored and shown everywhere.

use std::fmt;
use std::str::FromStr;

macro_rules! text_enum {
    ($(#[$m:meta])* $name:ident ($noun:literal) { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result { f.write_str(self.as_str()) }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> { s.serialize_str(self.as_str()) }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownName {
                        kind: $noun,
                        given: s.to_string(),
                        expected: vec![$($text),+].join(", "),
                    }),
                }
            }
        }
    };
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not {kind}; expected one of: {expected}")]
pub struct UnknownName {
    /// What was expected, with its article (`a run status`).
    pub kind: &'static str,
    pub given: String,
    pub expected: String,
}

text_enum!(
    /// The one outcome class of a tool attempt.
    Outcome ("an outcome") {
        Completed => "COMPLETED",
        TimedOut => "TIMED_OUT",
        Failed => "FAILED",
        Denied => "DENIED",
        InvalidInput => "INVALID_INPUT",
    }
);

text_enum!(
    /// What made a FAILED attempt fail, when Cairn could tell from what it saw where the attempt
    /// ran ([`crate::cause`]): a failure a step's `retry_on` can name beside the outcome classes.
    CauseKind ("a cause") {
        NoSpace => "NO_SPACE",
    }
);

/// One entry of a step's `retry_on`: an outcome class (`TIMED_OUT`, `FAILED`, …), or the cause
/// of a FAILED attempt (`NO_SPACE`: its output disk was full), so a policy can treat a full disk
/// as transient without retrying every failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryOn {
    Outcome(Outcome),
    Cause(CauseKind),
}

impl RetryOn {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryOn::Outcome(o) => o.as_str(),
            RetryOn::Cause(c) => c.as_str(),
        }
    }

    /// Whether an attempt that ended with `outcome`, for `cause`, is one this entry retries. A
    /// cause names a kind of FAILED attempt: a timeout or a refusal is never one.
    pub fn matches(self, outcome: Outcome, cause: Option<CauseKind>) -> bool {
        match self {
            RetryOn::Outcome(o) => o == outcome,
            RetryOn::Cause(c) => outcome == Outcome::Failed && cause == Some(c),
        }
    }
}

impl From<Outcome> for RetryOn {
    fn from(o: Outcome) -> RetryOn {
        RetryOn::Outcome(o)
    }
}

impl fmt::Display for RetryOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `retry_on` entry that is neither an outcome class nor a cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{given}` is neither an outcome class nor a failure cause; use TIMED_OUT, FAILED, DENIED, INVALID_INPUT \
     (outcome classes) or NO_SPACE (a FAILED attempt whose output disk was full)"
)]
pub struct UnknownRetryOn {
    pub given: String,
}

impl FromStr for RetryOn {
    type Err = UnknownRetryOn;
    fn from_str(s: &str) -> Result<Self, UnknownRetryOn> {
        // The two sets share no name, so the order of the lookups decides nothing.
        s.parse::<Outcome>()
            .map(RetryOn::Outcome)
            .or_else(|_| s.parse::<CauseKind>().map(RetryOn::Cause))
            .map_err(|_| UnknownRetryOn { given: s.to_string() })
    }
}

impl serde::Serialize for RetryOn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for RetryOn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

text_enum!(
    /// The status of a step record.
    StepStatus ("a step status") {
        Running => "RUNNING",
        Completed => "COMPLETED",
        Failed => "FAILED",
    }
);

text_enum!(
    /// The status of a run.
    RunStatus ("a run status") {
        Pending => "PENDING",
        Running => "RUNNING",
        Ready => "READY",
        Blocked => "BLOCKED",
        Failed => "FAILED",
        Cancelled => "CANCELLED",
    }
);

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Ready | RunStatus::Blocked | RunStatus::Failed | RunStatus::Cancelled)
    }
}

/// How a finished attempt is classified from the process's exit, as the sandbox contract says:
/// exit 0 with one JSON value is COMPLETED; 64/65 INVALID_INPUT; 77 DENIED; over the timeout
/// TIMED_OUT; anything else (another code, a signal, invalid JSON) FAILED.
pub fn classify_exit(exit_code: Option<i32>, timed_out: bool, stdout_is_json: bool) -> Outcome {
    if timed_out {
        return Outcome::TimedOut;
    }
    match exit_code {
        Some(0) if stdout_is_json => Outcome::Completed,
        Some(64) | Some(65) => Outcome::InvalidInput,
        Some(77) => Outcome::Denied,
        _ => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(o.as_str().parse::<Outcome>().unwrap(), *o);
        }
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>().unwrap(), *s);
        }
        let err = "DONE".parse::<StepStatus>().unwrap_err();
        assert!(err.to_string().contains("RUNNING, COMPLETED, FAILED"));
    }

    #[test]
    fn a_retry_on_entry_is_an_outcome_or_a_cause_of_a_failed_attempt() {
        let no_space: RetryOn = "NO_SPACE".parse().unwrap();
        assert_eq!(no_space, RetryOn::Cause(CauseKind::NoSpace));
        assert_eq!("FAILED".parse::<RetryOn>().unwrap(), RetryOn::Outcome(Outcome::Failed));
        assert!(no_space.matches(Outcome::Failed, Some(CauseKind::NoSpace)));
        assert!(!no_space.matches(Outcome::Failed, None), "an ordinary failure is not a full disk");
        assert!(!no_space.matches(Outcome::TimedOut, Some(CauseKind::NoSpace)), "a cause names a FAILED attempt");
        assert!(RetryOn::Outcome(Outcome::Failed).matches(Outcome::Failed, Some(CauseKind::NoSpace)));
        let e = "LATE".parse::<RetryOn>().unwrap_err().to_string();
        assert!(e.starts_with("`LATE` is neither") && e.contains("INVALID_INPUT") && e.contains("NO_SPACE"), "{e}");
        assert_eq!(serde_json::to_value(no_space).unwrap(), serde_json::json!("NO_SPACE"));
        assert_eq!(
            serde_json::from_value::<RetryOn>(serde_json::json!("TIMED_OUT")).unwrap(),
            Outcome::TimedOut.into()
        );
    }

    #[test]
    fn exits_are_classified_by_the_sandbox_contract() {
        assert_eq!(classify_exit(Some(0), false, true), Outcome::Completed);
        assert_eq!(classify_exit(Some(0), false, false), Outcome::Failed);
        assert_eq!(classify_exit(Some(64), false, false), Outcome::InvalidInput);
        assert_eq!(classify_exit(Some(65), false, true), Outcome::InvalidInput);
        assert_eq!(classify_exit(Some(77), false, false), Outcome::Denied);
        assert_eq!(classify_exit(Some(1), false, true), Outcome::Failed);
        assert_eq!(classify_exit(None, false, false), Outcome::Failed);
        assert_eq!(classify_exit(Some(0), true, true), Outcome::TimedOut);
    }
}
