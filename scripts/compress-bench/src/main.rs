//! The compressors scripts/bench-compress compares, on the same input:
//! today's (main at afe5e5d: gzip by miniz_oxide at level 6, one thread),
//! the shipped one (src/image/compress.rs, compiled in unchanged) and the
//! other candidates, each at 1 and 2 threads, as input MB per wall second
//! and per CPU second, and the ratio (compressed / input).
//!
//! Usage: compress-bench [--repeat N] [--only TEXT] [--synthetic MIB] FILE...
//! (`--only shipped`: the candidates whose name contains TEXT, and today's
//! for the ratio — on a busy machine, the pair that matters, sooner.)

// A benchmark prints its table to a terminal (the project's `outln!` is for
// the CLI, whose stdout may be a closed pipe).
#![allow(clippy::disallowed_macros)]

#[allow(dead_code, unreachable_pub)]
#[path = "../../../src/image/compress.rs"]
mod compress;

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// CPU seconds (user + system) this process has used so far.
fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// Counts what is written, and nothing else.
struct Count(usize);
impl Write for Count {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0 += b.len();
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Today's compressor: what flate2's `rust_backend` does for
/// `GzBuilder::new().mtime(0).operating_system(255)` at level 6 —
/// miniz_oxide's raw deflate over the whole layer, framed as gzip (its
/// golden digest, below, is main's).
fn today(data: &[u8]) -> Vec<u8> {
    use miniz_oxide::deflate::core::{CompressorOxide, create_comp_flags_from_zip_params};
    use miniz_oxide::{MZFlush, MZStatus};
    let mut c = CompressorOxide::new(create_comp_flags_from_zip_params(6, -15, 0));
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
    let mut buf = vec![0u8; 256 << 10];
    let mut input = data;
    loop {
        let r = miniz_oxide::deflate::stream::deflate(&mut c, input, &mut buf, MZFlush::Finish);
        input = &input[r.bytes_consumed..];
        out.extend_from_slice(&buf[..r.bytes_written]);
        match r.status {
            Ok(MZStatus::StreamEnd) => break,
            Ok(_) => {}
            Err(e) => panic!("miniz_oxide: {e:?}"),
        }
    }
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// libdeflate on `data` whole (one thread: it has no streaming).
fn libdeflate_whole(data: &[u8]) -> usize {
    let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(6).unwrap());
    let mut out = vec![0u8; c.gzip_compress_bound(data.len())];
    c.gzip_compress(data, &mut out).unwrap()
}

/// libdeflate per 1 MiB block, each its own gzip member (libdeflate ends
/// every stream with a final block and takes no dictionary, so its blocks
/// cannot be one member): the compressed size at `threads` threads.
fn libdeflate_members(data: &[u8], threads: usize) -> usize {
    let blocks: Vec<&[u8]> = data.chunks(compress::BLOCK).collect();
    let next = AtomicUsize::new(0);
    let total = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut c =
                    libdeflater::Compressor::new(libdeflater::CompressionLvl::new(6).unwrap());
                let mut out = vec![0u8; c.gzip_compress_bound(compress::BLOCK)];
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(block) = blocks.get(i) else { break };
                    let n = c.gzip_compress(block, &mut out).unwrap();
                    total.fetch_add(n, Ordering::Relaxed);
                }
            });
        }
    });
    total.into_inner()
}

/// gzp's pigz-style gzip (flate2 — here zlib-rs — per 1 MiB block with the
/// previous block's tail as dictionary): one member.
fn gzp_gzip(data: &[u8], threads: usize) -> usize {
    use gzp::ZWriter;
    use std::sync::{Arc, Mutex};
    struct Shared(Arc<Mutex<usize>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            *self.0.lock().unwrap() += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let n = Arc::new(Mutex::new(0));
    let mut z = gzp::par::compress::ParCompressBuilder::<gzp::deflate::Gzip>::new()
        .num_threads(threads)
        .unwrap()
        .buffer_size(compress::BLOCK)
        .unwrap()
        .compression_level(flate2::Compression::new(6))
        .from_writer(Shared(n.clone()));
    z.write_all(data).unwrap();
    z.finish().unwrap();
    *n.lock().unwrap()
}

/// A layer-like mix (text, repeated records, noise) of `len` bytes.
fn synthetic(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words = [
        "usr",
        "lib",
        "share",
        "doc",
        "python3",
        "site-packages",
        "__init__",
        ".py",
        "def ",
        "return ",
        "import ",
        "self",
        "(",
        ")",
        ":\n",
        "    ",
        "if ",
        "else",
        "for ",
        " in ",
        "node_modules",
        "package.json",
        "\"version\": ",
        "license",
        "MIT",
        "\n",
    ];
    while out.len() < len {
        match next() % 10 {
            0..=5 => {
                for _ in 0..next() % 2000 {
                    out.extend_from_slice(words[next() as usize % words.len()].as_bytes());
                }
            }
            6 | 7 => {
                // Machine code-ish: small integers, repeated opcodes.
                for _ in 0..next() % 20_000 {
                    let v = next();
                    out.push(if v % 4 == 0 {
                        (v >> 8) as u8
                    } else {
                        (v % 16) as u8
                    });
                }
            }
            _ => {
                // Already-compressed data (a .gz, a .png in the layer).
                for _ in 0..next() % 12_000 {
                    out.push(next() as u8);
                }
            }
        }
    }
    out.truncate(len);
    out
}

struct Measure {
    wall: f64,
    cpu: f64,
    size: usize,
}

fn measure(f: impl FnOnce() -> usize) -> Measure {
    let (t, c) = (Instant::now(), cpu_seconds());
    let size = f();
    Measure {
        wall: t.elapsed().as_secs_f64(),
        cpu: cpu_seconds() - c,
        size,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut repeat = 3;
    let mut only: Option<String> = None;
    let mut inputs: Vec<(String, Vec<u8>)> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeat" => {
                repeat = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--repeat N")
            }
            "--only" => only = Some(args.next().expect("--only TEXT")),
            "--synthetic" => {
                let mib: usize = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--synthetic MIB");
                inputs.push((format!("synthetic mix {mib} MiB"), synthetic(mib << 20)));
            }
            path => {
                let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
                inputs.push((path.to_string(), data));
            }
        }
    }
    // The baseline is main's compressor, byte for byte: main's golden.
    let golden = today(&b"sunaba layer\n".repeat(10_000));
    assert_eq!(
        (
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&golden)),
            golden.len()
        ),
        (
            "9c6cbae1312f10d97582e951f62de7a4c9c741f3bdd56652ecface8236e5936c".to_string(),
            303
        ),
        "the baseline is not main's compressor"
    );
    type Candidate = (&'static str, usize, Box<dyn Fn(&[u8]) -> usize>);
    let candidates: Vec<Candidate> = vec![
        (
            "today: miniz_oxide 0.9.1, one stream",
            1,
            Box::new(|d| today(d).len()),
        ),
        (
            "shipped: compress.rs (zlib-rs 0.6.9, 1 MiB blocks + dict)",
            1,
            Box::new(|d| compress::gzip_on(d, Count(0), String::new(), 1).unwrap().size as usize),
        ),
        (
            "shipped: compress.rs (zlib-rs 0.6.9, 1 MiB blocks + dict)",
            2,
            Box::new(|d| compress::gzip_on(d, Count(0), String::new(), 2).unwrap().size as usize),
        ),
        (
            "libdeflate 1.26 (libdeflater), one stream",
            1,
            Box::new(libdeflate_whole),
        ),
        (
            "libdeflate 1.26, 1 MiB blocks as gzip members",
            1,
            Box::new(|d| libdeflate_members(d, 1)),
        ),
        (
            "libdeflate 1.26, 1 MiB blocks as gzip members",
            2,
            Box::new(|d| libdeflate_members(d, 2)),
        ),
        (
            "gzp 2.0.4 Gzip (zlib-rs, 1 MiB + dict)",
            1,
            Box::new(|d| gzp_gzip(d, 1)),
        ),
        (
            "gzp 2.0.4 Gzip (zlib-rs, 1 MiB + dict)",
            2,
            Box::new(|d| gzp_gzip(d, 2)),
        ),
    ];
    let candidates: Vec<Candidate> = candidates
        .into_iter()
        .filter(|(what, _, _)| {
            what.starts_with("today") || only.as_deref().is_none_or(|o| what.contains(o))
        })
        .collect();
    for (name, data) in &inputs {
        let mb = data.len() as f64 / 1e6;
        println!("## {name}: {mb:.1} MB, best of {repeat} (spread: slowest/fastest wall)");
        println!("| compressor | threads | MB/s wall | MB/s per CPU-s | ratio | spread |");
        println!("|---|---|---|---|---|---|");
        let mut today_best = 0.0;
        for (what, threads, f) in &candidates {
            let runs: Vec<Measure> = (0..repeat).map(|_| measure(|| f(data))).collect();
            let best = runs
                .iter()
                .min_by(|a, b| a.wall.total_cmp(&b.wall))
                .unwrap();
            let worst = runs.iter().map(|m| m.wall).fold(0.0, f64::max);
            let speed = mb / best.wall;
            if what.starts_with("today") {
                today_best = speed;
            }
            println!(
                "| {what} | {threads} | {speed:.1} ({:.2}× today) | {:.1} | {:.4} | {:.0} % |",
                speed / today_best,
                mb / best.cpu,
                best.size as f64 / data.len() as f64,
                (worst / best.wall - 1.0) * 100.0
            );
        }
        println!();
    }
}
