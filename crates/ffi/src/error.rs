//! The library's errors: each maps to a [`RallyStatus`] code for C, and its text is kept as
//! the thread's last error message (`rally_last_error`).

use crate::types::RallyStatus;
use std::cell::RefCell;
use std::ffi::CString;

/// What went wrong in a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FfiError {
    /// A pointer argument was null.
    #[error("{0} is null")]
    Null(&'static str),
    /// An output buffer was too small; the call wrote the size needed.
    #[error("{what} holds {capacity} but {needed} are needed: call again with a larger one")]
    BufferTooSmall {
        /// Which buffer.
        what: &'static str,
        /// What the caller gave.
        capacity: usize,
        /// What is needed.
        needed: usize,
    },
    /// An argument was out of range or not what it should be.
    #[error("{0}")]
    Invalid(String),
    /// The connect token was malformed, expired or does not fit the address.
    #[error("{0}")]
    Token(String),
    /// Not connected yet (or not yet joined, for room messages).
    #[error("not connected: connect, then call rally_client_update until the Joined event")]
    NotConnected,
    /// The connection ended, with why and where.
    #[error("{0}")]
    Disconnected(String),
    /// The client was closed.
    #[error("the client was closed: only rally_client_destroy may be called on it")]
    Closed,
    /// The socket failed.
    #[error("{0}")]
    Io(String),
    /// The session refused a message (too large, too many waiting).
    #[error("{0}")]
    Refused(String),
    /// A bug in the library: a panic was caught at the boundary.
    #[error("internal error in {0} (a bug in rally-ffi; please report it): {1}")]
    Panic(&'static str, String),
}

impl FfiError {
    /// The code C sees.
    pub fn status(&self) -> RallyStatus {
        match self {
            FfiError::Null(_) => RallyStatus::NullPointer,
            FfiError::BufferTooSmall { .. } => RallyStatus::BufferTooSmall,
            FfiError::Invalid(_) => RallyStatus::InvalidArgument,
            FfiError::Token(_) => RallyStatus::InvalidToken,
            FfiError::NotConnected => RallyStatus::NotConnected,
            FfiError::Disconnected(_) => RallyStatus::Disconnected,
            FfiError::Closed => RallyStatus::Closed,
            FfiError::Io(_) => RallyStatus::Io,
            FfiError::Refused(_) => RallyStatus::Refused,
            FfiError::Panic(..) => RallyStatus::Panic,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `error`'s message as this thread's last error.
pub fn set_last_error(function: &str, error: &FfiError) {
    // Messages hold no NUL; if one ever did, it is cut there rather than lost.
    let text = format!("{function}: {error}");
    let text = text.split('\0').next().unwrap_or_default().to_owned();
    let text = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
}

/// This thread's last error message, with its NUL.
pub fn last_error() -> Vec<u8> {
    LAST_ERROR.with(|last| last.borrow().as_bytes_with_nul().to_vec())
}

/// What a caught panic said, if it said it as text.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
