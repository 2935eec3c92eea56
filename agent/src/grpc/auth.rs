//! Tokens and roles (DESIGN §10).
//!
//! Tokens come from the agent's config file, each with a name (written to the audit log) and a
//! role: `viewer` (watch and list) or `operator` (every action). A client sends
//! `authorization: Bearer <token>`. The presented token is hashed (SHA-256) and compared with
//! every configured token's hash in constant time, without stopping at a match, so neither the
//! content nor the length of a token leaks through timing.
//!
//! With no tokens configured (allowed on a loopback listener only, or with `--insecure`) every
//! caller is the operator `local`.

use leasehold_shared::{Actor, Role};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// Shortest token accepted in the config file.
pub const MIN_TOKEN_LEN: usize = 16;
/// The actor of calls when no tokens are configured.
pub const OPEN_ACTOR: &str = "local";
/// The actor recorded for a denied call without a valid token.
pub const UNAUTHENTICATED_ACTOR: &str = "unauthenticated";

/// One configured token.
#[derive(Clone)]
pub struct Token {
    /// Name for the audit log (never the secret).
    pub name: String,
    pub role: Role,
    /// The secret clients present.
    pub secret: String,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a token list is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("token {0:?}: the secret must be at least {MIN_TOKEN_LEN} characters")]
    Short(String),
    #[error("token {0:?}: the secret must be printable ASCII without spaces")]
    Charset(String),
    #[error("token name {0:?} must be 1-64 printable characters")]
    Name(String),
    #[error("token {0:?}: role must be viewer or operator")]
    Role(String),
    #[error("token name {0:?} is given twice")]
    DuplicateName(String),
    #[error("tokens {0:?} and {1:?} have the same secret")]
    DuplicateSecret(String, String),
}

struct Stored {
    name: String,
    role: Role,
    digest: [u8; 32],
}

/// Who may call what.
pub struct Auth {
    tokens: Vec<Stored>,
}

fn digest(secret: &[u8]) -> [u8; 32] {
    Sha256::digest(secret).into()
}

impl Auth {
    /// Checks and stores `tokens`; an empty list means open access.
    pub fn new(tokens: Vec<Token>) -> Result<Self, TokenError> {
        let mut stored: Vec<Stored> = Vec::with_capacity(tokens.len());
        for t in tokens {
            if t.name.is_empty() || t.name.len() > 64 || t.name.chars().any(char::is_control) {
                return Err(TokenError::Name(t.name));
            }
            if t.role == Role::System {
                return Err(TokenError::Role(t.name));
            }
            if t.secret.len() < MIN_TOKEN_LEN {
                return Err(TokenError::Short(t.name));
            }
            if !t.secret.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(TokenError::Charset(t.name));
            }
            if stored.iter().any(|s| s.name == t.name) {
                return Err(TokenError::DuplicateName(t.name));
            }
            let d = digest(t.secret.as_bytes());
            if let Some(s) = stored.iter().find(|s| s.digest == d) {
                return Err(TokenError::DuplicateSecret(s.name.clone(), t.name));
            }
            stored.push(Stored {
                name: t.name,
                role: t.role,
                digest: d,
            });
        }
        Ok(Self { tokens: stored })
    }

    /// True when no tokens are configured.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Configured tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// True when no tokens are configured.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The caller named by the request's token.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<Actor, Status> {
        if self.tokens.is_empty() {
            return Ok(Actor {
                name: OPEN_ACTOR.into(),
                role: Role::Operator,
            });
        }
        let Some(value) = metadata.get(leasehold_proto::AUTHORIZATION) else {
            return Err(Status::unauthenticated(
                "this agent requires a token: send `authorization: Bearer <token>` \
                 (leasehold --token or LEASEHOLD_TOKEN)",
            ));
        };
        let presented = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("the authorization metadata must be `Bearer <token>`")
            })?;
        self.lookup(presented.trim().as_bytes())
            .ok_or_else(|| Status::unauthenticated("the token is not known to this agent"))
    }

    /// Finds the token in constant time over every configured one.
    fn lookup(&self, presented: &[u8]) -> Option<Actor> {
        let d = digest(presented);
        let mut found: Option<usize> = None;
        for (i, t) in self.tokens.iter().enumerate() {
            let equal: bool = t.digest.ct_eq(&d).into();
            // No early exit: every token is compared whatever matched.
            if equal {
                found = Some(i);
            }
        }
        found.map(|i| Actor {
            name: self.tokens[i].name.clone(),
            role: self.tokens[i].role,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn token(name: &str, role: Role, secret: &str) -> Token {
        Token {
            name: name.into(),
            role,
            secret: secret.into(),
        }
    }

    fn meta(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("authorization", value.parse().unwrap());
        m
    }

    #[test]
    fn tokens_name_their_role_and_bad_ones_are_unauthenticated() {
        let auth = Auth::new(vec![
            token("ops", Role::Operator, "operator-secret-0123"),
            token("dash", Role::Viewer, "viewer-secret-01234"),
        ])
        .unwrap();
        let ops = auth
            .authenticate(&meta("Bearer operator-secret-0123"))
            .unwrap();
        assert_eq!((ops.name.as_str(), ops.role), ("ops", Role::Operator));
        let dash = auth
            .authenticate(&meta("Bearer viewer-secret-01234"))
            .unwrap();
        assert_eq!(dash.role, Role::Viewer);
        for bad in [
            "Bearer operator-secret-012",
            "Bearer operator-secret-01234",
            "operator-secret-0123",
            "Basic b3BzOm9wcw==",
            "Bearer ",
        ] {
            let e = auth.authenticate(&meta(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::Unauthenticated, "{bad}");
        }
        let e = auth.authenticate(&MetadataMap::new()).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("requires a token"), "{}", e.message());
    }

    #[test]
    fn no_tokens_is_open_operator_access() {
        let auth = Auth::new(Vec::new()).unwrap();
        assert!(auth.is_open());
        let a = auth.authenticate(&MetadataMap::new()).unwrap();
        assert_eq!((a.name.as_str(), a.role), (OPEN_ACTOR, Role::Operator));
    }

    #[test]
    fn weak_duplicate_or_system_tokens_are_refused() {
        assert_eq!(
            Auth::new(vec![token("a", Role::Operator, "short")]).err(),
            Some(TokenError::Short("a".into()))
        );
        assert!(Auth::new(vec![token("a", Role::Operator, "has a space in it!")]).is_err());
        assert!(Auth::new(vec![token("a", Role::System, "0123456789abcdef")]).is_err());
        assert!(Auth::new(vec![token("", Role::Viewer, "0123456789abcdef")]).is_err());
        assert!(
            Auth::new(vec![
                token("a", Role::Viewer, "0123456789abcdef"),
                token("a", Role::Viewer, "0123456789abcdeg"),
            ])
            .is_err()
        );
        assert!(
            Auth::new(vec![
                token("a", Role::Viewer, "0123456789abcdef"),
                token("b", Role::Operator, "0123456789abcdef"),
            ])
            .is_err()
        );
    }

    #[test]
    fn the_secret_never_shows_in_debug_output() {
        let t = token("ops", Role::Operator, "operator-secret-0123");
        assert!(!format!("{t:?}").contains("operator-secret"));
    }
}
