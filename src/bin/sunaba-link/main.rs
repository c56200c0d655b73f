//! sunaba-link: a shaped link between a registry client and a registry,
//! both on loopback — a test and benchmark tool, not part of the product
//! (docs/testing.md#the-shaped-link-sunaba-link). It forwards HTTP/1.1 as
//! it came, at a bandwidth per direction, with a round-trip time, and with
//! the faults its rules put on chosen requests; it counts connections,
//! requests and bytes, per direction and per exchange.
//!
//! It prints the address it listens on as its first line of stdout, then
//! serves until SIGTERM or SIGINT, when it writes its stats (`--stats-file`)
//! and exits 0. Usage errors exit 64, failures 1.

mod admin;
mod faults;
mod http;
mod link;
mod shape;
mod stats;

use clap::Parser;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// A shaped link to a registry on loopback: bandwidth, latency, faults.
#[derive(Debug, Parser)]
#[command(name = "sunaba-link", version)]
struct Args {
    /// The registry to forward to, HOST:PORT on loopback.
    #[arg(long, value_name = "HOST:PORT")]
    upstream: String,
    /// Where to listen (a loopback address; port 0: any free port).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:0")]
    listen: String,
    /// Bandwidth both ways: `100mbit`, `40mbit`, `1gbit`, `none`.
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// Bandwidth client → registry (overrides --rate that way).
    #[arg(long, value_name = "RATE")]
    rate_up: Option<String>,
    /// Bandwidth registry → client (overrides --rate that way).
    #[arg(long, value_name = "RATE")]
    rate_down: Option<String>,
    /// Round-trip time: half of it on each message each way, and one more
    /// for a new connection (`40ms`).
    #[arg(long, value_name = "DURATION", default_value = "0ms")]
    rtt: String,
    /// Fault rules to start with: a JSON list (see `POST /_link/rules`).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// Where to write the stats (JSON) on SIGTERM or SIGINT.
    #[arg(long, value_name = "FILE")]
    stats_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(64);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sunaba-link: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

/// A loopback socket address, or why not.
fn loopback(text: &str, what: &str) -> Result<SocketAddr, String> {
    let addr: SocketAddr = text
        .parse()
        .map_err(|_| format!("--{what} {text:?}: not IP:PORT"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "--{what} {addr}: the link listens on loopback only"
        ));
    }
    Ok(addr)
}

/// The upstream's address: every address its name has must be loopback.
async fn upstream(text: &str) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(text)
        .await
        .map_err(|e| format!("--upstream {text:?}: {e}"))?
        .collect();
    match addrs.first() {
        Some(first) if addrs.iter().all(|a| a.ip().is_loopback()) => Ok(*first),
        Some(_) => Err(format!(
            "--upstream {text}: the link talks to loopback only"
        )),
        None => Err(format!("--upstream {text:?}: no address")),
    }
}

fn settings(args: &Args) -> Result<(shape::ShapeSpec, Vec<faults::Rule>), String> {
    let both = args
        .rate
        .as_deref()
        .map(shape::parse_rate)
        .transpose()?
        .flatten();
    let one_way = |r: &Option<String>| -> Result<Option<u64>, String> {
        match r.as_deref() {
            Some(text) => shape::parse_rate(text),
            None => Ok(both),
        }
    };
    let rtt =
        humantime::parse_duration(&args.rtt).map_err(|e| format!("--rtt {:?}: {e}", args.rtt))?;
    if rtt > std::time::Duration::from_secs(60) {
        return Err(format!("--rtt {:?}: at most 60s", args.rtt));
    }
    let spec = shape::ShapeSpec {
        up_bps: one_way(&args.rate_up)?,
        down_bps: one_way(&args.rate_down)?,
        rtt_ms: rtt.as_millis() as u64,
    };
    let rules = match &args.rules {
        Some(path) => {
            let text =
                std::fs::read(path).map_err(|e| format!("--rules {}: {e}", path.display()))?;
            admin::parse_rules(&text).map_err(|e| format!("--rules {}: {e}", path.display()))?
        }
        None => Vec::new(),
    };
    Ok((spec, rules))
}

async fn run(args: Args) -> ExitCode {
    let setup = async {
        let listen = loopback(&args.listen, "listen")?;
        let upstream_addr = upstream(&args.upstream).await?;
        let (spec, rules) = settings(&args)?;
        Ok::<_, String>((listen, upstream_addr, spec, rules))
    };
    let (listen, upstream_addr, spec, rules) = match setup.await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sunaba-link: {e}");
            return ExitCode::from(64);
        }
    };
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("sunaba-link: listening on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bound = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sunaba-link: {e}");
            return ExitCode::FAILURE;
        }
    };
    let link = Arc::new(link::Link::new(
        bound,
        upstream_addr,
        &args.upstream,
        shape::Shape::new(spec),
        rules,
    ));
    // The first line of stdout: where to point the client. A reader that
    // went away is no reason to stop serving.
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{bound}").and_then(|()| stdout.flush());

    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sunaba-link: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        () = link::serve(link.clone(), listener) => {}
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    if let Some(path) = &args.stats_file
        && let Err(e) = write_stats(&link, path)
    {
        eprintln!("sunaba-link: writing the stats to {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Writes the stats whole: a temporary file beside `path`, renamed over it.
fn write_stats(link: &link::Link, path: &Path) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(&link.stats.report()).map_err(std::io::Error::other)?;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(&json)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
