//! Bytes as lowercase hex digits and back: how people see keys, tokens, test vectors and the
//! raw bytes inside Rally's debug form. The one implementation every crate of the workspace
//! uses.
//!
//! ```
//! use rally_wire::hex;
//!
//! assert_eq!(hex::encode(&[0x04, 0xa1, 0xff]), "04a1ff");
//! assert_eq!(hex::decode("04A1ff"), Ok(vec![0x04, 0xa1, 0xff]));
//! assert!(hex::decode("4a1").is_err());
//! ```

use crate::HexError;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as two lowercase hex digits each.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    debug_assert_eq!(out.len(), bytes.len() * 2);
    out
}

/// The bytes that `text` spells, two hex digits per byte, either case, nothing else.
pub fn decode(text: &str) -> Result<Vec<u8>, HexError> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return Err(HexError::OddLength { digits: digits.len() });
    }
    let value = |at: usize| match digits[at] {
        d @ b'0'..=b'9' => Ok(d - b'0'),
        d @ b'a'..=b'f' => Ok(d - b'a' + 10),
        d @ b'A'..=b'F' => Ok(d - b'A' + 10),
        _ => Err(HexError::NotADigit { at }),
    };
    let bytes: Vec<u8> = (0..digits.len())
        .step_by(2)
        .map(|at| Ok(value(at)? << 4 | value(at + 1)?))
        .collect::<Result<_, _>>()?;
    debug_assert_eq!(bytes.len() * 2, digits.len());
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn junk_is_refused_with_where_it_is() {
        assert_eq!(decode(""), Ok(vec![]));
        assert_eq!(decode("abc"), Err(HexError::OddLength { digits: 3 }));
        assert_eq!(decode("0g"), Err(HexError::NotADigit { at: 1 }));
        assert_eq!(decode("zz"), Err(HexError::NotADigit { at: 0 }));
        // A character of two bytes is not a digit, and is never split.
        assert_eq!(decode("é1"), Err(HexError::OddLength { digits: 3 }));
        assert_eq!(decode("é"), Err(HexError::NotADigit { at: 0 }));
        assert_eq!(decode("00 1"), Err(HexError::NotADigit { at: 2 }));
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let text = encode(&bytes);
            prop_assert_eq!(text.len(), bytes.len() * 2);
            prop_assert!(text.bytes().all(|d| DIGITS.contains(&d)));
            prop_assert_eq!(decode(&text), Ok(bytes.clone()));
            prop_assert_eq!(decode(&text.to_uppercase()), Ok(bytes));
        }
    }
}
