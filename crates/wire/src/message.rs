//! User messages (RPC arguments, custom metadata) through serde: compact binary via bitcode for
//! the wire, JSON for people.
//!
//! Any `Serialize + Deserialize` type works; nothing needs deriving beyond serde's own traits.
//! The binary form allocates its output (bitcode's serde path has no buffer reuse), which is fine
//! for one-off RPCs; the per-tick hot path is the snapshot codec, which does not allocate.

use crate::error::MessageError;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The default bound on one encoded message, matching proto's default reliable message limit.
pub const MESSAGE_BYTES_MAX_DEFAULT: usize = 64 * 1024;

/// Encodes and decodes user messages, refusing any larger than `message_bytes_max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageCodec {
    /// The largest encoded message accepted in either direction.
    pub message_bytes_max: usize,
}

impl Default for MessageCodec {
    fn default() -> Self {
        Self { message_bytes_max: MESSAGE_BYTES_MAX_DEFAULT }
    }
}

impl MessageCodec {
    /// The binary form of `value`.
    pub fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<Vec<u8>, MessageError> {
        let bytes = bitcode::serialize(value)?;
        self.check_len(bytes.len())?;
        Ok(bytes)
    }

    /// Decodes the binary form. Oversized input is refused before it is parsed; malformed input
    /// is an error, never a panic.
    pub fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, MessageError> {
        self.check_len(bytes.len())?;
        Ok(bitcode::deserialize(bytes)?)
    }

    /// The human-readable form of `value`, for logs and `rally inspect`.
    pub fn to_json<T: Serialize + ?Sized>(&self, value: &T) -> Result<String, MessageError> {
        Ok(serde_json::to_string_pretty(value)?)
    }

    /// Parses the human-readable form, with the same size limit as the binary one.
    pub fn from_json<T: DeserializeOwned>(&self, json: &str) -> Result<T, MessageError> {
        self.check_len(json.len())?;
        Ok(serde_json::from_str(json)?)
    }

    fn check_len(&self, len: usize) -> Result<(), MessageError> {
        if len > self.message_bytes_max {
            return Err(MessageError::TooLarge { len, max: self.message_bytes_max });
        }
        Ok(())
    }
}
