//! A loopback proxy in front of a real registry that injects faults
//! (statuses with Retry-After, wrong digests, truncated bodies, hangs before
//! or after forwarding, rewritten bodies, headers and queries, redirects),
//! splits tag lists into pages with `Link` headers, which distribution 2.8
//! itself never sends, and logs every request (with its body size) for
//! tests that count requests. `Location` headers naming the upstream are
//! rewritten to the proxy, so upload sessions come back through it too.

use super::server::{Reply, Request, Response, Server, serve};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status (and Retry-After value) without forwarding.
    Status(u16, Option<String>),
    /// Replace Docker-Content-Digest with this value.
    SetDigest(String),
    DropDigest,
    SetContentType(String),
    /// Replace the body (Content-Length follows).
    Body(Vec<u8>),
    /// Send only half of the body, then close.
    Truncate,
    /// Never answer.
    Hang,
    /// 307 to the same target on another origin (`http://host:port`).
    Redirect(String),
    /// 307 to exactly this URL (a storage backend's pre-signed URL).
    RedirectTo(String),
    /// Forward the request (the registry carries it out), then never
    /// answer: a client killed now did the write but never learnt it.
    HangAfterForward,
    /// Forward the request without its query string (a mount request then
    /// opens a plain upload session: distribution answers 202).
    DropQuery,
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub method: Option<&'static str>,
    pub path_contains: String,
    /// The request's path must be exactly `path_contains`.
    pub exact: bool,
    pub fault: Fault,
    /// Applications left (`usize::MAX`: always).
    pub times: usize,
}

pub fn rule(method: Option<&'static str>, path_contains: &str, fault: Fault, times: usize) -> Rule {
    Rule {
        method,
        path_contains: path_contains.to_string(),
        exact: false,
        fault,
        times,
    }
}

/// A rule for one exact request path (`/v2/<repo>/manifests/<tag>`).
pub fn rule_exact(method: &'static str, path: &str, fault: Fault, times: usize) -> Rule {
    Rule {
        exact: true,
        ..rule(Some(method), path, fault, times)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkMode {
    /// Relative `Link` to the next page.
    Relative,
    /// Absolute `Link` on the same origin.
    Absolute,
    /// Every page links to itself.
    Loop,
    /// The next page is announced on another host.
    OtherHost(String),
}

#[derive(Debug, Clone)]
pub struct Logged {
    pub method: String,
    pub target: String,
    pub accept: Option<String>,
    pub authorization: bool,
    /// Bytes of the request body.
    pub body: usize,
    /// When it arrived (a step's seconds are read off the log).
    pub at: std::time::Instant,
}

pub struct ProxyState {
    pub rules: Vec<Rule>,
    pub log: Vec<Logged>,
    /// Split tag lists into pages of at most this many.
    pub tag_page: Option<usize>,
    pub link_mode: LinkMode,
    /// Added to every request (makes concurrency observable).
    pub delay: Duration,
    /// Authorization to add upstream when the client sent none (a storage
    /// backend behind a redirect would use a signed URL instead).
    pub inject_authorization: Option<String>,
}

pub struct Proxy {
    pub server: Server,
    pub state: Arc<Mutex<ProxyState>>,
    pub max_inflight: Arc<AtomicUsize>,
}

impl Proxy {
    pub fn authority(&self) -> String {
        self.server.authority()
    }
    pub fn add(&self, r: Rule) {
        self.state.lock().unwrap().rules.push(r);
    }
    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }
    pub fn clear_log(&self) {
        self.state.lock().unwrap().log.clear();
    }
    pub fn count(&self, method: &str, path_contains: &str) -> usize {
        self.log()
            .iter()
            .filter(|l| l.method == method && l.target.contains(path_contains))
            .count()
    }

    /// Proxies to `upstream` (`http://…` or `https://…`), listening on `bind`.
    pub async fn start(upstream: &str, bind: &str, ca_pem: Option<&[u8]>) -> Proxy {
        let mut http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if let Some(pem) = ca_pem {
            http = http.tls_certs_merge(reqwest::Certificate::from_pem_bundle(pem).unwrap());
        }
        let http = http.build().unwrap();
        let state = Arc::new(Mutex::new(ProxyState {
            rules: Vec::new(),
            log: Vec::new(),
            tag_page: None,
            link_mode: LinkMode::Relative,
            delay: Duration::ZERO,
            inject_authorization: None,
        }));
        let inflight = Arc::new(AtomicUsize::new(0));
        let max_inflight = Arc::new(AtomicUsize::new(0));
        let (st, upstream, inf, max) = (
            state.clone(),
            upstream.to_string(),
            inflight.clone(),
            max_inflight.clone(),
        );
        let self_authority = Arc::new(Mutex::new(String::new()));
        let me = self_authority.clone();
        let server = serve(bind, move |req| {
            let (st, upstream, http, inf, max, me) = (
                st.clone(),
                upstream.clone(),
                http.clone(),
                inf.clone(),
                max.clone(),
                me.clone(),
            );
            async move {
                let now = inf.fetch_add(1, Ordering::SeqCst) + 1;
                max.fetch_max(now, Ordering::SeqCst);
                let me = me.lock().unwrap().clone();
                let reply = handle(&st, &upstream, &http, &me, req).await;
                inf.fetch_sub(1, Ordering::SeqCst);
                reply
            }
        })
        .await;
        *self_authority.lock().unwrap() = server.authority();
        Proxy {
            server,
            state,
            max_inflight,
        }
    }
}

async fn forward(
    http: &reqwest::Client,
    upstream: &str,
    req: &Request,
    target: &str,
    inject: Option<&str>,
) -> Response {
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap();
    let mut rb = http.request(method, format!("{upstream}{target}"));
    for name in ["accept", "authorization", "content-type"] {
        if let Some(v) = req.header(name) {
            rb = rb.header(name, v);
        }
    }
    if req.header("authorization").is_none()
        && let Some(a) = inject
    {
        rb = rb.header("authorization", a);
    }
    if !req.body.is_empty() {
        rb = rb.body(req.body.clone());
    }
    let resp = rb.send().await.expect("proxy: upstream request");
    let mut out = Response::new(resp.status().as_u16());
    for (n, v) in resp.headers() {
        let n = n.as_str();
        if matches!(
            n,
            "connection" | "keep-alive" | "transfer-encoding" | "date"
        ) {
            continue;
        }
        if n == "content-length" {
            out.head_length = v.to_str().ok().and_then(|s| s.parse().ok());
            continue;
        }
        out.headers
            .push((n.to_string(), v.to_str().unwrap_or_default().to_string()));
    }
    out.body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
    out
}

async fn handle(
    state: &Mutex<ProxyState>,
    upstream: &str,
    http: &reqwest::Client,
    me: &str,
    req: Request,
) -> Reply {
    let (faults, tag_page, link_mode, delay, inject) = {
        let mut s = state.lock().unwrap();
        s.log.push(Logged {
            method: req.method.clone(),
            target: req.target.clone(),
            accept: req.header("accept").map(str::to_string),
            authorization: req.header("authorization").is_some(),
            body: req.body.len(),
            at: std::time::Instant::now(),
        });
        let faults: Vec<Fault> = s
            .rules
            .iter_mut()
            .filter(|r| {
                r.times > 0
                    && r.method.is_none_or(|m| m == req.method)
                    && if r.exact {
                        req.path() == r.path_contains
                    } else {
                        req.target.contains(&r.path_contains)
                    }
            })
            .map(|r| {
                r.times = r.times.saturating_sub(1);
                r.fault.clone()
            })
            .collect();
        (
            faults,
            s.tag_page,
            s.link_mode.clone(),
            s.delay,
            s.inject_authorization.clone(),
        )
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    for fault in &faults {
        match fault {
            Fault::Status(code, retry_after) => {
                let mut r = Response::json(
                    *code,
                    &serde_json::json!({"errors": [{"code": "TOOMANYREQUESTS", "message": "injected fault"}]}),
                );
                if let Some(ra) = retry_after {
                    r.set_header("Retry-After", ra.clone());
                }
                return Reply::Send(r);
            }
            Fault::Hang => return Reply::Hang,
            Fault::Redirect(origin) => {
                return Reply::Send(
                    Response::new(307).header("Location", format!("{origin}{}", req.target)),
                );
            }
            Fault::RedirectTo(url) => {
                return Reply::Send(Response::new(307).header("Location", url.clone()));
            }
            _ => {}
        }
    }
    let target = if faults.iter().any(|f| matches!(f, Fault::DropQuery)) {
        req.path().to_string()
    } else {
        req.target.clone()
    };
    let mut resp = match tag_page {
        Some(page) if req.path().ends_with("/tags/list") && req.method == "GET" => {
            paginate(http, upstream, &req, page, &link_mode, me).await
        }
        _ => forward(http, upstream, &req, &target, inject.as_deref()).await,
    };
    if let Some(location) = resp
        .headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case("location"))
        .map(|(_, v)| v)
        && let Some(rest) = location.strip_prefix(upstream)
    {
        *location = format!("http://{me}{rest}");
    }
    if faults.iter().any(|f| matches!(f, Fault::HangAfterForward)) {
        return Reply::Hang;
    }
    let mut truncate = false;
    for fault in faults {
        match fault {
            Fault::SetDigest(d) => resp.set_header("Docker-Content-Digest", d),
            Fault::DropDigest => resp.remove_header("Docker-Content-Digest"),
            Fault::SetContentType(t) => resp.set_header("Content-Type", t),
            Fault::Body(b) => {
                resp.head_length = Some(b.len());
                resp.body = b;
            }
            Fault::Truncate => truncate = true,
            _ => {}
        }
    }
    if truncate {
        let half = resp.body.len() / 2;
        return Reply::Truncate(resp, half);
    }
    Reply::Send(resp)
}

/// Serves one page of the upstream's (complete) tag list, `n` and `last`
/// as the distribution spec describes them.
async fn paginate(
    http: &reqwest::Client,
    upstream: &str,
    req: &Request,
    page: usize,
    mode: &LinkMode,
    me: &str,
) -> Response {
    let full = forward(http, upstream, req, req.path(), None).await;
    if full.status != 200 {
        return full;
    }
    let doc: serde_json::Value = serde_json::from_slice(&full.body).unwrap();
    let mut tags: Vec<String> = doc["tags"]
        .as_array()
        .map(|a| a.iter().map(|t| t.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    tags.sort();
    let n = req
        .query_param("n")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(page)
        .min(page);
    let start = match req.query_param("last") {
        Some(last) => tags.partition_point(|t| t.as_str() <= last.as_str()),
        None => 0,
    };
    let end = (start + n).min(tags.len());
    let body = serde_json::json!({"name": doc["name"], "tags": tags[start..end]});
    let mut resp = Response::json(200, &body);
    if end < tags.len() {
        let next = format!("{}?n={n}&last={}", req.path(), tags[end - 1]);
        let link = match mode {
            LinkMode::Relative => format!("<{next}>; rel=\"next\""),
            LinkMode::Absolute => format!("<http://{me}{next}>; rel=\"next\""),
            LinkMode::Loop => format!("<{}>; rel=\"next\"", req.target),
            LinkMode::OtherHost(h) => format!("<http://{h}{next}>; rel=\"next\""),
        };
        resp.set_header("Link", link);
    }
    resp
}
