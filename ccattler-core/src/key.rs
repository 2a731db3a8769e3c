//! Keys: validated, cheap-to-clone paths that name facts.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

/// The longest key a store accepts, in bytes.
///
/// etcd accepts longer keys, but a key this long is almost certainly a bug in the code that built
/// it, and every watcher pays for its length.
pub const MAX_KEY_LEN: usize = 4096;

/// The name of a fact: a `/`-separated path such as `desired/service/team/web`.
///
/// # Guarantees
///
/// A `Key` is never empty, never starts with `/`, never contains a NUL byte or an empty segment
/// (`a//b`), and is at most [`MAX_KEY_LEN`] bytes long. These rules hold for every key a store
/// hands out, so code that receives a `Key` never re-validates it.
///
/// Cloning is cheap (a reference count), which matters because the same key travels through the
/// store, its history, every watcher and every controller view.
///
/// ```
/// use ccattler_core::Key;
///
/// let key = Key::new("desired/service/web")?;
/// assert_eq!(key.as_str(), "desired/service/web");
/// assert!(Key::new("/leading/slash").is_err());
/// # Ok::<(), ccattler_core::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Key(Arc<str>);

/// Why a string is not a valid [`Key`] or key prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is the empty string.
    #[error("key is empty; a key is a path such as `desired/service/web`")]
    Empty,
    /// The key starts with `/`.
    #[error("key {0:?} starts with `/`; keys are relative paths such as `desired/service/web`")]
    LeadingSlash(String),
    /// The key contains a NUL byte.
    #[error("key {0:?} contains a NUL byte, which no store accepts")]
    Nul(String),
    /// The key contains `//` or ends with `/`.
    #[error("key {0:?} has an empty path segment (`//` or a trailing `/`); remove it")]
    EmptySegment(String),
    /// A namespace prefix does not end with `/`.
    #[error(
        "namespace prefix {0:?} must end with `/` (like `cluster-a/`), so that one namespace \
         never holds another's keys"
    )]
    NamespaceWithoutSlash(String),
    /// The key is longer than [`MAX_KEY_LEN`].
    #[error("key of {len} bytes is longer than the limit of {MAX_KEY_LEN} bytes")]
    TooLong {
        /// Length of the rejected key in bytes.
        len: usize,
    },
}

impl Key {
    /// Validates `path` and makes a key of it.
    ///
    /// # Errors
    ///
    /// [`KeyError`] when `path` is empty, starts with `/`, contains a NUL byte or an empty segment,
    /// or is longer than [`MAX_KEY_LEN`].
    pub fn new(path: impl AsRef<str>) -> Result<Self, KeyError> {
        let path = path.as_ref();
        validate_key(path)?;
        Ok(Key(Arc::from(path)))
    }

    /// Joins a prefix and path segments: `Key::join("desired/service/", ["web"])`.
    ///
    /// # Errors
    ///
    /// The same as [`Key::new`] for the joined string.
    pub fn join<I, S>(prefix: &str, segments: I) -> Result<Self, KeyError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut path = String::from(prefix);
        for segment in segments {
            if !path.is_empty() && !path.ends_with('/') {
                path.push('/');
            }
            path.push_str(segment.as_ref());
        }
        Key::new(path)
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the key lies under `prefix` (plain string prefix, as etcd compares keys).
    pub fn has_prefix(&self, prefix: &str) -> bool {
        self.0.starts_with(prefix)
    }

    /// The key with `prefix` removed, if it starts with it and something remains.
    pub fn strip_prefix(&self, prefix: &str) -> Option<&str> {
        self.0.strip_prefix(prefix).filter(|rest| !rest.is_empty())
    }
}

fn validate_key(path: &str) -> Result<(), KeyError> {
    if path.is_empty() {
        return Err(KeyError::Empty);
    }
    if path.ends_with('/') || path.contains("//") {
        return Err(KeyError::EmptySegment(path.to_owned()));
    }
    validate_prefix(path)
}

/// Checks a key prefix, as given to `scan` and `watch`.
///
/// A prefix follows the key rules except that it may be empty (everything) and may end with `/`.
///
/// # Errors
///
/// [`KeyError`] when the prefix starts with `/`, contains a NUL byte or `//`, or is too long.
pub fn validate_prefix(prefix: &str) -> Result<(), KeyError> {
    if prefix.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong { len: prefix.len() });
    }
    if prefix.starts_with('/') {
        return Err(KeyError::LeadingSlash(prefix.to_owned()));
    }
    if prefix.as_bytes().contains(&0) {
        return Err(KeyError::Nul(prefix.to_owned()));
    }
    if prefix.contains("//") {
        return Err(KeyError::EmptySegment(prefix.to_owned()));
    }
    Ok(())
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// Keys order as their strings do. Two clones of one key compare equal without reading their
/// bytes: a persistent map's nodes, copied on write, hold clones of the keys they shared, and
/// comparing those would otherwise read each key's text from wherever it lies in memory.
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Key {
    type Error = KeyError;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Key::new(value)
    }
}

impl TryFrom<String> for Key {
    type Error = KeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Key::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_as_their_text_whether_or_not_they_share_it() {
        let key = |k: &str| Key::new(k).unwrap();
        let a = key("placement/n1/web-1");
        assert_eq!(a.cmp(&a.clone()), std::cmp::Ordering::Equal);
        assert_eq!(a.cmp(&key("placement/n1/web-1")), std::cmp::Ordering::Equal);
        assert!(a < key("placement/n1/web-2") && key("placement/n1") < a);
        let fact = |key: Key, value: &'static str| {
            crate::Fact::created(key, value.into(), crate::Revision(3))
        };
        // Facts are equal by content, shared or not: their keys, and their values.
        assert_eq!(fact(a.clone(), "x"), fact(key("placement/n1/web-1"), "x"));
        let copied = crate::Value::copy_from_slice(b"x");
        let own_value = crate::Fact::created(a.clone(), copied, crate::Revision(3));
        assert_eq!(fact(a.clone(), "x"), own_value);
        let later = crate::Fact::created(a.clone(), "x".into(), crate::Revision(4));
        assert_ne!(fact(a.clone(), "x"), later);
        assert_ne!(fact(a.clone(), "x"), fact(a.clone(), "y"));
        assert_ne!(fact(a.clone(), "x"), fact(key("placement/n1/web-2"), "x"));
    }

    #[test]
    fn accepts_paths() {
        for ok in [
            "a",
            "desired/service/web",
            "desired/service/team/web",
            "a:b/c.d-e_f",
        ] {
            assert_eq!(Key::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_bad_keys_with_the_reason() {
        assert_eq!(Key::new(""), Err(KeyError::Empty));
        assert!(matches!(Key::new("/a"), Err(KeyError::LeadingSlash(_))));
        assert!(matches!(Key::new("a\0b"), Err(KeyError::Nul(_))));
        assert!(matches!(Key::new("a//b"), Err(KeyError::EmptySegment(_))));
        assert!(matches!(Key::new("a/"), Err(KeyError::EmptySegment(_))));
        let long = "k".repeat(MAX_KEY_LEN + 1);
        assert_eq!(
            Key::new(&long),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1
            })
        );
    }

    #[test]
    fn prefixes_may_be_empty_or_end_with_slash() {
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("desired/").is_ok());
        assert!(validate_prefix("/desired").is_err());
        assert!(validate_prefix("a\0").is_err());
    }

    #[test]
    fn join_inserts_separators() {
        let key = Key::join("desired/service/", ["team", "web"]).unwrap();
        assert_eq!(key.as_str(), "desired/service/team/web");
        assert_eq!(key.strip_prefix("desired/service/"), Some("team/web"));
        assert_eq!(key.strip_prefix("desired/service/team/web"), None);
    }
}
