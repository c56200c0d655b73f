//! A small token issuer (docker token auth spec) for a distribution
//! instance configured with `auth: token`. Tokens are RS256 JWTs signed with
//! the test key (by the `openssl` CLI) and carry the key's certificate in
//! `x5c`, which the registry checks against its `rootcertbundle`.

use super::distribution::{ISSUER, PASSWORD, SERVICE, USER, pki};
use super::server::{Reply, Request, Response, Server, serve};
use base64::Engine as _;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

pub const REFRESH_TOKEN: &str = "refresh-token-for-tester-0451";

#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub method: String,
    /// The authenticated user, if any.
    pub user: Option<String>,
    pub scope: Option<String>,
    pub grant_type: Option<String>,
}

pub struct IssuerState {
    /// `expires_in` announced to clients.
    pub ttl: u64,
    /// This many next tokens are issued already expired (JWT `exp` in the
    /// past), while still announcing `ttl`: the registry rejects them.
    pub expired_tokens: usize,
    /// Pad responses to this size (to test the client's token size cap).
    pub pad_to: usize,
    pub log: Vec<TokenRequest>,
}

pub struct Issuer {
    pub server: Server,
    pub state: Arc<Mutex<IssuerState>>,
}

impl Issuer {
    pub fn realm(&self) -> String {
        format!("http://{}/token", self.server.authority())
    }
    pub fn log(&self) -> Vec<TokenRequest> {
        self.state.lock().unwrap().log.clone()
    }

    pub async fn start() -> Issuer {
        let state = Arc::new(Mutex::new(IssuerState {
            ttl: 300,
            expired_tokens: 0,
            pad_to: 0,
            log: Vec::new(),
        }));
        let st = state.clone();
        let server = serve("127.0.0.1:0", move |req| {
            let st = st.clone();
            async move { Reply::Send(handle(&st, req).await) }
        })
        .await;
        Issuer { server, state }
    }
}

fn unauthorized(message: &str) -> Response {
    Response::json(
        401,
        &serde_json::json!({"errors": [{"code": "UNAUTHORIZED", "message": message}]}),
    )
}

async fn handle(state: &Mutex<IssuerState>, req: Request) -> Response {
    if req.path() != "/token" {
        return Response::new(404);
    }
    let mut params = req.query();
    if req.method == "POST" {
        params.extend(url::form_urlencoded::parse(&req.body).into_owned());
    }
    let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let grant_type = param("grant_type");
    // One `scope` parameter per resource (GET), or space-separated (OAuth2).
    let scopes: Vec<String> = params
        .iter()
        .filter(|(n, _)| n == "scope")
        .flat_map(|(_, v)| v.split(' ').map(str::to_string).collect::<Vec<_>>())
        .collect();
    let scope = (!scopes.is_empty()).then(|| scopes.join(" "));
    // Who is asking: basic auth (GET), or a refresh token / password (POST).
    let user = match (req.method.as_str(), grant_type.as_deref()) {
        ("POST", Some("refresh_token")) => {
            if param("refresh_token").as_deref() != Some(REFRESH_TOKEN) {
                return unauthorized("invalid refresh token");
            }
            Some(USER.to_string())
        }
        ("POST", Some("password")) => {
            if param("username").as_deref() != Some(USER)
                || param("password").as_deref() != Some(PASSWORD)
            {
                return unauthorized("invalid username or password");
            }
            Some(USER.to_string())
        }
        ("POST", _) => {
            return Response::json(400, &serde_json::json!({"error": "unsupported_grant_type"}));
        }
        _ => match req.header("authorization") {
            None => None,
            Some(h) => {
                let decoded = h
                    .strip_prefix("Basic ")
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                    .and_then(|b| String::from_utf8(b).ok());
                match decoded.as_deref().and_then(|d| d.split_once(':')) {
                    Some((u, p)) if u == USER && p == PASSWORD => Some(u.to_string()),
                    _ => return unauthorized("invalid username or password"),
                }
            }
        },
    };
    if param("service").as_deref() != Some(SERVICE) {
        return Response::json(
            400,
            &serde_json::json!({"errors": [{"code": "DENIED", "message": "unknown service"}]}),
        );
    }
    let (ttl, expired, pad_to) = {
        let mut s = state.lock().unwrap();
        s.log.push(TokenRequest {
            method: req.method.clone(),
            user: user.clone(),
            scope: scope.clone(),
            grant_type: grant_type.clone(),
        });
        let expired = s.expired_tokens > 0;
        if expired {
            s.expired_tokens -= 1;
        }
        (s.ttl, expired, s.pad_to)
    };
    // Access: users get pull+push everywhere, anonymous callers pull on public/*.
    let mut access = Vec::new();
    for scope in &scopes {
        let parts: Vec<&str> = scope.split(':').collect();
        if parts.len() == 3 && parts[0] == "repository" {
            let name = parts[1];
            let wanted: Vec<&str> = parts[2].split(',').collect();
            let granted: Vec<&str> = wanted
                .into_iter()
                .filter(|a| user.is_some() || (*a == "pull" && name.starts_with("public/")))
                .collect();
            access
                .push(serde_json::json!({"type": "repository", "name": name, "actions": granted}));
        }
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // distribution allows 60 s of clock skew, so "expired" means well past.
    let exp = if expired { now - 600 } else { now + ttl as i64 };
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": user.clone().unwrap_or_default(), "aud": SERVICE,
        "exp": exp, "nbf": now - 900, "iat": now - 900,
        "jti": format!("{now}-{}", rand::random::<u64>()), "access": access,
    });
    let token = sign(&claims).await;
    let mut body = serde_json::json!({
        "token": token, "access_token": token, "expires_in": ttl,
        "issued_at": httpdate::fmt_http_date(SystemTime::now()),
    });
    if pad_to > 0 {
        body["padding"] = serde_json::json!("x".repeat(pad_to));
    }
    Response::json(200, &body)
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

async fn sign(claims: &serde_json::Value) -> String {
    let pki = pki();
    let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "x5c": [pki.token_cert_der_b64]});
    let input = format!(
        "{}.{}",
        b64url(&serde_json::to_vec(&header).unwrap()),
        b64url(&serde_json::to_vec(claims).unwrap())
    );
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new("openssl")
        .args(["dgst", "-sha256", "-sign"])
        .arg(&pki.token_key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("openssl for signing");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "openssl dgst: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    format!("{input}.{}", b64url(&out.stdout))
}
