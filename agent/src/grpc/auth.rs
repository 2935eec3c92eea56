//! Tokens, roles and local identities (DESIGN §10, "Local access").
//!
//! Tokens come from the agent's config file, each with a name (written to the audit log) and a
//! role: `viewer` (watch and list) or `operator` (every action). A client sends
//! `authorization: Bearer <token>`. The presented token is hashed (SHA-256) and compared with
//! every configured token's hash in constant time, without stopping at a match, so neither the
//! content nor the length of a token leaks through timing.
//!
//! Who a caller is, by its connection ([`Peer`]) when it presents no token:
//!
//! ```text
//!   token presented, tokens configured ──▶ that token's name and role (any transport)
//!   Unix socket, uid = agent's or 0     ──▶ operator `uid:N(name)`
//!   Unix socket, any other uid          ──▶ PERMISSION_DENIED (the socket is 0600 anyway)
//!   tokens configured, TCP              ──▶ UNAUTHENTICATED
//!   no tokens, loopback TCP             ──▶ viewer `uid:N(name)` (or `local` when the uid is
//!                                           unknown); operator with --insecure-local
//!   no tokens, other TCP (--insecure)   ──▶ operator `local`
//!   no peer (in-process servers)        ──▶ as without a transport: `local`, or UNAUTHENTICATED
//! ```
//!
//! Loopback TCP is reachable by every user of the host, so without a token it may only read;
//! the Unix socket is where the kernel vouches for the caller's uid.

use leasehold_shared::local::{current_uid, uid_label};
use leasehold_shared::{Actor, Role};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;
use tonic::metadata::MetadataMap;

use super::peer::Peer;

/// Shortest token accepted in the config file.
pub const MIN_TOKEN_LEN: usize = 16;
/// The actor of calls when no tokens are configured and the caller's uid is unknown.
pub const OPEN_ACTOR: &str = "local";
/// What a local caller without a token is told when it attempts an action over loopback TCP.
pub const READ_ONLY_LOOPBACK: &str = "loopback TCP without a token is read-only: use the \
    agent's Unix socket (leasehold finds it on this host), a token, or start the agent with \
    --insecure-local";
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

/// How a caller was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A configured token.
    Token,
    /// The agent's Unix socket: the kernel gave the uid.
    UnixSocket,
    /// Loopback TCP without a token (a viewer unless `--insecure-local`).
    LoopbackTcp,
    /// No tokens configured: a non-loopback TCP caller (`--insecure`) or one without a
    /// transport peer (in-process servers).
    Open,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Its name in the audit log and its role.
    pub actor: Actor,
    /// How it was identified.
    pub via: Via,
}

impl Caller {
    /// The refusal of `action` to this caller when it is not an operator.
    pub fn refusal(&self, action: &str) -> Status {
        match self.via {
            Via::LoopbackTcp => Status::permission_denied(READ_ONLY_LOOPBACK),
            _ => Status::permission_denied(format!(
                "token {:?} has the viewer role: it may watch and list, not {action}",
                self.actor.name
            )),
        }
    }
}

/// A caller refused before its role was known.
#[derive(Debug)]
pub struct Rejected {
    /// The name its denied calls are audited under.
    pub actor: String,
    /// What it is told.
    pub status: Status,
}

impl Rejected {
    fn unauthenticated(message: &str) -> Self {
        Self {
            actor: UNAUTHENTICATED_ACTOR.into(),
            status: Status::unauthenticated(message.to_string()),
        }
    }
}

/// Who may call what.
pub struct Auth {
    tokens: Vec<Stored>,
    /// Loopback TCP callers without a token are operators (`--insecure-local`).
    insecure_local: bool,
    /// The agent's own uid: its user may act through the Unix socket.
    agent_uid: Option<u32>,
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
        let agent_uid = match current_uid() {
            Ok(uid) => Some(uid),
            Err(error) => {
                tracing::warn!(%error, "cannot read this process's uid; only root may act through the Unix socket");
                None
            }
        };
        Ok(Self {
            tokens: stored,
            insecure_local: false,
            agent_uid,
        })
    }

    /// Makes loopback TCP callers without a token operators (`--insecure-local`) instead of
    /// viewers.
    pub fn with_insecure_local(mut self, insecure_local: bool) -> Self {
        self.insecure_local = insecure_local;
        self
    }

    /// Sets the uid whose processes may act through the Unix socket (besides root); the
    /// current process's by default.
    pub fn with_agent_uid(mut self, uid: Option<u32>) -> Self {
        self.agent_uid = uid;
        self
    }

    /// True when loopback TCP callers without a token are operators.
    pub fn insecure_local(&self) -> bool {
        self.insecure_local
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

    /// The caller of a request with `metadata` that came over `peer` (see the module docs).
    pub fn authenticate(
        &self,
        metadata: &MetadataMap,
        peer: Option<&Peer>,
    ) -> Result<Caller, Rejected> {
        if !self.tokens.is_empty()
            && let Some(value) = metadata.get(leasehold_proto::AUTHORIZATION)
        {
            let presented = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| {
                    Rejected::unauthenticated("the authorization metadata must be `Bearer <token>`")
                })?;
            let actor = self
                .lookup(presented.trim().as_bytes())
                .ok_or_else(|| Rejected::unauthenticated("the token is not known to this agent"))?;
            return Ok(Caller {
                actor,
                via: Via::Token,
            });
        }
        let open = |name: String, role: Role, via: Via| {
            Ok(Caller {
                actor: Actor { name, role },
                via,
            })
        };
        match peer {
            Some(Peer::Unix { uid, .. }) => {
                if *uid == 0 || Some(*uid) == self.agent_uid {
                    open(uid_label(*uid), Role::Operator, Via::UnixSocket)
                } else {
                    Err(Rejected {
                        actor: uid_label(*uid),
                        status: Status::permission_denied(format!(
                            "{} may not use this agent's socket: only its own user and root may",
                            uid_label(*uid)
                        )),
                    })
                }
            }
            _ if !self.tokens.is_empty() => Err(Rejected::unauthenticated(
                "this agent requires a token: send `authorization: Bearer <token>` \
                 (leasehold --token or LEASEHOLD_TOKEN)",
            )),
            Some(tcp) if tcp.is_loopback_tcp() => {
                let name = tcp.uid().map_or_else(|| OPEN_ACTOR.to_string(), uid_label);
                let role = if self.insecure_local {
                    Role::Operator
                } else {
                    Role::Viewer
                };
                open(name, role, Via::LoopbackTcp)
            }
            Some(Peer::Tcp { .. }) | None => {
                open(OPEN_ACTOR.to_string(), Role::Operator, Via::Open)
            }
        }
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

    fn tcp(addr: &str, uid: Option<u32>) -> Peer {
        Peer::Tcp {
            addr: addr.parse().unwrap(),
            uid,
        }
    }

    fn unix(uid: u32) -> Peer {
        Peer::Unix { uid, pid: Some(42) }
    }

    fn who(auth: &Auth, metadata: &MetadataMap, peer: Option<&Peer>) -> (String, Role, Via) {
        let c = auth.authenticate(metadata, peer).unwrap();
        (c.actor.name, c.actor.role, c.via)
    }

    fn refused(auth: &Auth, metadata: &MetadataMap, peer: Option<&Peer>) -> Rejected {
        auth.authenticate(metadata, peer).unwrap_err()
    }

    fn with_tokens() -> Auth {
        Auth::new(vec![
            token("ops", Role::Operator, "operator-secret-0123"),
            token("dash", Role::Viewer, "viewer-secret-01234"),
        ])
        .unwrap()
        .with_agent_uid(Some(1000))
    }

    #[test]
    fn tokens_name_their_role_and_bad_ones_are_unauthenticated() {
        let auth = with_tokens();
        let loopback = tcp("127.0.0.1:5000", Some(1000));
        let remote = tcp("10.0.0.7:5000", None);
        for peer in [None, Some(&loopback), Some(&remote), Some(&unix(0))] {
            let ops = who(&auth, &meta("Bearer operator-secret-0123"), peer);
            assert_eq!(ops, ("ops".into(), Role::Operator, Via::Token), "{peer:?}");
            let dash = who(&auth, &meta("Bearer viewer-secret-01234"), peer);
            assert_eq!(dash.1, Role::Viewer, "{peer:?}");
            for bad in [
                "Bearer operator-secret-012",
                "Bearer operator-secret-01234",
                "operator-secret-0123",
                "Basic b3BzOm9wcw==",
                "Bearer ",
            ] {
                // A wrong token is refused even on the socket, where no token would pass.
                let e = refused(&auth, &meta(bad), peer);
                assert_eq!(e.status.code(), tonic::Code::Unauthenticated, "{bad}");
                assert_eq!(e.actor, UNAUTHENTICATED_ACTOR);
            }
        }
        for peer in [None, Some(&loopback), Some(&remote)] {
            let e = refused(&auth, &MetadataMap::new(), peer);
            assert_eq!(e.status.code(), tonic::Code::Unauthenticated, "{peer:?}");
            assert!(e.status.message().contains("requires a token"), "{e:?}");
        }
    }

    #[test]
    fn no_tokens_and_no_peer_or_a_remote_peer_is_the_open_operator() {
        let auth = Auth::new(Vec::new()).unwrap();
        assert!(auth.is_open());
        let open = (OPEN_ACTOR.to_string(), Role::Operator, Via::Open);
        assert_eq!(who(&auth, &MetadataMap::new(), None), open);
        let remote = tcp("10.0.0.7:5000", Some(1000));
        assert_eq!(who(&auth, &MetadataMap::new(), Some(&remote)), open);
        // Without configured tokens a presented one is not checked (as before).
        assert_eq!(who(&auth, &meta("Bearer whatever"), None), open);
    }

    #[test]
    fn the_socket_admits_the_agents_user_and_root_only() {
        let auth = Auth::new(Vec::new()).unwrap().with_agent_uid(Some(1000));
        let expect = |uid: u32| (uid_label(uid), Role::Operator, Via::UnixSocket);
        assert_eq!(who(&auth, &MetadataMap::new(), Some(&unix(0))), expect(0));
        assert_eq!(
            who(&auth, &MetadataMap::new(), Some(&unix(1000))),
            expect(1000)
        );
        assert_eq!(expect(0).0, "uid:0(root)");
        let e = refused(&auth, &MetadataMap::new(), Some(&unix(65534)));
        assert_eq!(e.status.code(), tonic::Code::PermissionDenied);
        assert_eq!(e.actor, uid_label(65534));
        // Tokens configured: the socket's own users still need none.
        let auth = with_tokens();
        assert_eq!(
            who(&auth, &MetadataMap::new(), Some(&unix(1000))),
            expect(1000)
        );
        let e = refused(&auth, &MetadataMap::new(), Some(&unix(1001)));
        assert_eq!(e.status.code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn loopback_tcp_without_a_token_is_a_viewer_unless_insecure_local() {
        let auth = Auth::new(Vec::new()).unwrap().with_agent_uid(Some(1000));
        assert!(!auth.insecure_local());
        let known = tcp("127.0.0.1:5000", Some(65534));
        let unknown = tcp("[::1]:5000", None);
        let c = auth
            .authenticate(&MetadataMap::new(), Some(&known))
            .unwrap();
        assert_eq!(
            (c.actor.name.as_str(), c.actor.role, c.via),
            ("uid:65534(nobody)", Role::Viewer, Via::LoopbackTcp)
        );
        let refusal = c.refusal("enqueue");
        assert_eq!(refusal.code(), tonic::Code::PermissionDenied);
        assert_eq!(refusal.message(), READ_ONLY_LOOPBACK);
        assert_eq!(
            who(&auth, &MetadataMap::new(), Some(&unknown)),
            (OPEN_ACTOR.into(), Role::Viewer, Via::LoopbackTcp)
        );
        let auth = auth.with_insecure_local(true);
        assert_eq!(
            who(&auth, &MetadataMap::new(), Some(&known)),
            ("uid:65534(nobody)".into(), Role::Operator, Via::LoopbackTcp)
        );
        assert_eq!(
            who(&auth, &MetadataMap::new(), Some(&unknown)),
            (OPEN_ACTOR.into(), Role::Operator, Via::LoopbackTcp)
        );
    }

    #[test]
    fn a_viewer_tokens_refusal_names_the_token() {
        let auth = with_tokens();
        let c = auth
            .authenticate(&meta("Bearer viewer-secret-01234"), None)
            .unwrap();
        let s = c.refusal("cancel");
        assert_eq!(s.code(), tonic::Code::PermissionDenied);
        assert!(
            s.message().contains("\"dash\" has the viewer role") && s.message().contains("cancel"),
            "{}",
            s.message()
        );
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
