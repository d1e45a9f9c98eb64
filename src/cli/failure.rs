//! [`Failure`]: why a command stopped, with its exit code, said once by `run`.

use super::exit;

/// Why a command stopped: the exit code, and what to say (`error: {message}`), said once by
/// [`run`](super::run). `message` is `None` when the details were already printed (a spec's findings).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(super) code: u8,
    pub(super) message: Option<String>,
}

impl Failure {
    /// Something could not be read or started: a file, a flag's value, a listener (exit 2).
    pub(crate) fn unreadable(message: impl Into<String>) -> Failure {
        Failure { code: exit::UNREADABLE, message: Some(message.into()) }
    }

    /// Flags that do not go together, or that a command needs (exit 2, as clap's own).
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::unreadable(message)
    }

    /// What was asked for is invalid: a spec, a request (exit 1).
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure { code: exit::INVALID, message: Some(message.into()) }
    }

    /// A failure whose details were printed where they arose.
    pub(crate) fn quiet(code: u8) -> Failure {
        Failure { code, message: None }
    }

    /// Says why, if not said already, and gives the exit code.
    pub(super) fn print(self) -> u8 {
        if let Some(message) = &self.message {
            errln!("error: {message}");
        }
        self.code
    }
}
