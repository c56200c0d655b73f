//! Layer compression at push, owned by this tool so that a compressed
//! digest is a function of the uncompressed layer alone.
//!
//! The engine keeps layers uncompressed, and the manifest digest a pin
//! names covers the *compressed* bytes: whatever compresses decides the
//! digest. An engine's push compresses with its own Go version's gzip, at
//! its own settings, and remembers what it sent in its distribution
//! metadata — another engine, or the same one after a prune, gives other
//! digests for the same image. So the layers are compressed here, with one
//! compressor at fixed settings, on every core, pigz-style:
//!
//! - the layer is cut into [`BLOCK`]-sized input blocks at fixed offsets
//!   (the last one shorter); each is deflated on its own, primed with the
//!   last [`DICTIONARY`] bytes of the block before it as a preset
//!   dictionary (so matches reach back across the cut, as in one stream),
//!   and ended with a sync flush (the last with the final block), so the
//!   pieces concatenate into one deflate stream;
//! - deflate by `flate2` on its `zlib-rs` backend, both pinned exactly in
//!   Cargo.toml (a new deflate implementation may choose other matches:
//!   other bytes, other digests), level 6, a fresh compressor per block;
//! - one gzip member (RFC 1952): header mtime 0, no file name, no comment,
//!   OS byte 255 ("unknown"), no extra field; the trailer's CRC-32 combined
//!   from the blocks' and the size mod 2^32.
//!
//! A block's bytes depend on its own input and its predecessor's tail only,
//! never on which thread compressed it or how many there were: the same
//! layer gives the same bytes at 1, 2 or 64 threads, on any machine (zlib-rs
//! picks SIMD code by CPU, but only for exact functions — comparing,
//! sliding, checksums — never for which match it takes).
//!
//! [`COMPRESSOR`] names that choice; it is part of every key of the
//! [`LayerCache`](super::layer_cache::LayerCache), so a change of settings
//! never reads an old answer.

use sha2::Digest as _;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::{Mutex, mpsc};

/// The compressor and its settings, as the layer cache keys them (and a
/// directory name of the cache): the scheme and its block size, the level,
/// the deflate implementation and its version.
pub(crate) const COMPRESSOR: &str = "pgzip-1m-6-zlib_rs-0.6.9";

/// Input bytes per block: the unit of parallel work, and part of the
/// format (another size gives other bytes).
pub(crate) const BLOCK: usize = 1 << 20;

/// The tail of the previous block that primes the next one: deflate's
/// whole window, so no match is lost to the cut.
pub(crate) const DICTIONARY: usize = 32 << 10;

const LEVEL: u32 = 6;

/// gzip's header: magic, deflate, no flags, mtime 0, XFL 0 (what gzip
/// writes at level 6), OS 255.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Chooses the number of compression threads: `SUNABA_COMPRESS_THREADS`
/// (1..=[`MAX_THREADS`]) when set — benchmarks and tests pin it — else
/// every core this process may run on.
pub(crate) const THREADS_ENV: &str = "SUNABA_COMPRESS_THREADS";
pub(crate) const MAX_THREADS: usize = 64;

/// What compressing one layer gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compressed {
    /// `sha256:…` of the uncompressed layer (its diff_id).
    pub diff_id: String,
    /// `sha256:…` of the gzip stream (the blob's digest).
    pub digest: String,
    pub size: u64,
}

/// Copies what is read through it to `copy`: a layer kept (spilled) in the
/// same pass that scans, hashes or compresses it.
pub(crate) struct Tee<R, W> {
    pub inner: R,
    pub copy: W,
}

impl<R: std::io::Read, W: Write> std::io::Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.copy.write_all(&buf[..n])?;
        Ok(n)
    }
}

/// Counts and hashes what is written (or read) through it.
pub(crate) struct Hashing<W> {
    inner: W,
    hash: sha2::Sha256,
    bytes: u64,
}

impl<W> Hashing<W> {
    pub(crate) fn new(inner: W) -> Hashing<W> {
        Hashing {
            inner,
            hash: sha2::Sha256::new(),
            bytes: 0,
        }
    }

    /// `sha256:…` of what was written, and the writer.
    pub(crate) fn finish(self) -> (String, W) {
        (hex(self.hash), self.inner)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: std::io::Read> std::io::Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

fn hex(h: sha2::Sha256) -> String {
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// Compresses `input` (an uncompressed layer tar, whose diff_id the caller
/// has hashed: the release does it as it spills the layer, to know whether
/// it needs compressing at all) into `output` on the default number of
/// threads ([`threads`]), hashing the output as it goes.
pub(crate) fn gzip(
    input: impl Read,
    output: impl Write,
    diff_id: String,
) -> std::io::Result<Compressed> {
    gzip_on(input, output, diff_id, threads()?)
}

/// [`gzip`] on `threads` threads (scripts/bench-compress measures 1 and 2).
pub(crate) fn gzip_on(
    input: impl Read,
    output: impl Write,
    diff_id: String,
    threads: usize,
) -> std::io::Result<Compressed> {
    let (digest, size) = compress(input, output, threads)?;
    Ok(Compressed {
        diff_id,
        digest,
        size,
    })
}

/// [`gzip_with`] on the default number of threads.
#[cfg(test)]
pub(crate) fn gzip_unhashed(input: impl Read, output: impl Write) -> std::io::Result<Compressed> {
    gzip_with(input, output, threads()?)
}

/// The number of compression threads: [`THREADS_ENV`] when set, else the
/// cores this process may run on (its CPU affinity, as
/// `available_parallelism` reads it).
pub(crate) fn threads() -> std::io::Result<usize> {
    match std::env::var_os(THREADS_ENV) {
        Some(v) => parse_threads(&v.to_string_lossy()),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

fn parse_threads(value: &str) -> std::io::Result<usize> {
    value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_THREADS).contains(n))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{THREADS_ENV}={}: expected a number of threads from 1 to {MAX_THREADS}",
                    value.escape_debug()
                ),
            )
        })
}

/// Compresses `input` into `output` on `threads` threads (1: on the
/// caller's alone); the bytes are the same for every `threads`. Memory is
/// bounded by a window of blocks in flight (about four per thread), not by
/// the layer's size.
#[cfg(test)]
pub(crate) fn gzip_with(
    input: impl Read,
    output: impl Write,
    threads: usize,
) -> std::io::Result<Compressed> {
    // The input hashed as the compressor reads it, for the tests' diff_id.
    let mut input = Hashing::new(input);
    let (digest, size) = compress(&mut input, output, threads)?;
    Ok(Compressed {
        diff_id: input.finish().0,
        digest,
        size,
    })
}

/// The gzip of `input` into `output` on `threads` threads: its digest and
/// size.
fn compress(
    input: impl Read,
    output: impl Write,
    threads: usize,
) -> std::io::Result<(String, u64)> {
    let mut blocks = Blocks {
        input,
        ahead: None,
        tail: None,
        index: 0,
        finished: false,
    };
    let mut sink = Sink {
        out: Hashing::new(output),
        crc: crc32fast::Hasher::new(),
        len: 0,
    };
    sink.out.write_all(&GZIP_HEADER)?;
    if threads <= 1 {
        while let Some(job) = blocks.next_job()? {
            sink.put(deflate_block(job))?;
        }
    } else {
        in_parallel(&mut blocks, &mut sink, threads)?;
    }
    let Sink { mut out, crc, len } = sink;
    out.write_all(&crc.finalize().to_le_bytes())?;
    // ISIZE is the input's size modulo 2^32 (RFC 1952): the cast truncates.
    out.write_all(&(len as u32).to_le_bytes())?;
    out.flush()?;
    Ok((hex(out.hash), out.bytes))
}

/// One input block and what deflating it needs.
struct Job {
    index: u64,
    data: Vec<u8>,
    /// The previous block's last [`DICTIONARY`] bytes (none for the first).
    dictionary: Option<Vec<u8>>,
    last: bool,
}

/// One block deflated.
struct Deflated {
    index: u64,
    bytes: std::io::Result<Vec<u8>>,
    crc: crc32fast::Hasher,
    len: usize,
}

/// Cuts the input into [`Job`]s at fixed offsets, one block ahead so the
/// last block is known as the last.
struct Blocks<R> {
    input: R,
    ahead: Option<Vec<u8>>,
    tail: Option<Vec<u8>>,
    index: u64,
    finished: bool,
}

impl<R: Read> Blocks<R> {
    /// Reads up to [`BLOCK`] bytes: a full block unless the input ends.
    fn read_block(&mut self) -> std::io::Result<Vec<u8>> {
        let mut block = Vec::with_capacity(BLOCK);
        (&mut self.input)
            .take(BLOCK as u64)
            .read_to_end(&mut block)?;
        Ok(block)
    }

    fn next_job(&mut self) -> std::io::Result<Option<Job>> {
        if self.finished {
            return Ok(None);
        }
        let data = match self.ahead.take() {
            Some(block) => block,
            None => self.read_block()?,
        };
        // A short block is the input's end; a full one may be followed by
        // nothing, which only reading on tells.
        let last = data.len() < BLOCK || {
            let next = self.read_block()?;
            let empty = next.is_empty();
            self.ahead = Some(next).filter(|_| !empty);
            empty
        };
        let dictionary = self
            .tail
            .replace(data[data.len().saturating_sub(DICTIONARY)..].to_vec());
        let job = Job {
            index: self.index,
            data,
            dictionary,
            last,
        };
        self.index += 1;
        self.finished = last;
        Ok(Some(job))
    }
}

/// Writes deflated blocks in order, combining their checksums.
struct Sink<W> {
    out: Hashing<W>,
    crc: crc32fast::Hasher,
    len: u64,
}

impl<W: Write> Sink<W> {
    fn put(&mut self, block: Deflated) -> std::io::Result<()> {
        self.out.write_all(&block.bytes?)?;
        self.crc.combine(&block.crc);
        self.len += block.len as u64;
        Ok(())
    }
}

/// Deflates one block on its own: a fresh compressor (nothing carried over
/// from another block but the dictionary), ended by a sync flush — or, for
/// the last block, the final block — so the pieces concatenate.
fn deflate_block(job: Job) -> Deflated {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&job.data);
    Deflated {
        index: job.index,
        bytes: deflate(&job),
        crc,
        len: job.data.len(),
    }
}

fn deflate(job: &Job) -> std::io::Result<Vec<u8>> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    let mut z = Compress::new(Compression::new(LEVEL), false);
    if let Some(dictionary) = &job.dictionary {
        z.set_dictionary(dictionary)
            .map_err(std::io::Error::other)?;
    }
    let flush = if job.last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    let data = job.data.as_slice();
    // Room for the worst case (stored blocks: 5 bytes per 64 KiB, plus the
    // flush) so one call does it; the loop is only a fallback, and its
    // capacities depend on the block alone, so the bytes still do too.
    let mut out = Vec::with_capacity(data.len() + (data.len() >> 8) + 256);
    loop {
        let consumed = usize::try_from(z.total_in()).unwrap_or(usize::MAX);
        let status = z
            .compress_vec(&data[consumed.min(data.len())..], &mut out, flush)
            .map_err(std::io::Error::other)?;
        let all_in = z.total_in() == data.len() as u64;
        match status {
            Status::StreamEnd => return Ok(out),
            _ if !job.last && all_in && out.len() < out.capacity() => return Ok(out),
            _ => out.reserve_exact(out.capacity().max(4096)),
        }
    }
}

/// The blocks deflated on `threads` workers while this thread reads the
/// input and writes what comes back, in order. At most `2 * threads + 2`
/// blocks are in flight (queued, being deflated or waiting their turn).
fn in_parallel<R: Read, W: Write>(
    blocks: &mut Blocks<R>,
    sink: &mut Sink<W>,
    threads: usize,
) -> std::io::Result<()> {
    let window = 2 * threads as u64 + 2;
    let (job_tx, job_rx) = mpsc::sync_channel::<Job>(threads);
    let job_rx = Mutex::new(job_rx);
    let (done_tx, done_rx) = mpsc::channel::<Deflated>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (job_rx, done_tx) = (&job_rx, done_tx.clone());
            scope.spawn(move || {
                loop {
                    let job = match job_rx.lock().map(|rx| rx.recv()) {
                        Ok(Ok(job)) => job,
                        _ => return,
                    };
                    let index = job.index;
                    // A panic becomes that block's error, so the writer,
                    // waiting for exactly this block, is never left hanging.
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        deflate_block(job)
                    }))
                    .unwrap_or_else(|_| Deflated {
                        index,
                        bytes: Err(std::io::Error::other("a compression thread panicked")),
                        crc: crc32fast::Hasher::new(),
                        len: 0,
                    });
                    if done_tx.send(done).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        // Dropping the sender (on return, error or not) stops the workers.
        let job_tx = job_tx;
        let (mut sent, mut written) = (0u64, 0u64);
        let mut waiting = BTreeMap::new();
        let mut reading = true;
        loop {
            if reading && sent - written < window {
                match blocks.next_job()? {
                    Some(job) => {
                        job_tx.send(job).map_err(|_| {
                            std::io::Error::other("the compression threads stopped")
                        })?;
                        sent += 1;
                        continue;
                    }
                    None => reading = false,
                }
            }
            if !reading && written == sent {
                return Ok(());
            }
            let done = done_rx
                .recv()
                .map_err(|_| std::io::Error::other("the compression threads stopped"))?;
            waiting.insert(done.index, done);
            while let Some(block) = waiting.remove(&written) {
                sink.put(block)?;
                written += 1;
            }
        }
    })
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_layer_gives_the_same_bytes_and_they_decompress_to_it() {
        let layer: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let first = gzip_unhashed(layer.as_slice(), &mut a).unwrap();
        let second = gzip_unhashed(layer.as_slice(), &mut b).unwrap();
        assert_eq!(first, second);
        assert_eq!(a, b);
        assert_eq!(first.size, a.len() as u64);
        assert_eq!(
            first.digest,
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&a)))
        );
        assert_eq!(
            first.diff_id,
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&layer)))
        );
        // The header says nothing of when or where: mtime 0, no name, OS 255.
        assert_eq!(&a[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(a.as_slice())
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, layer);
    }

    /// A layer-like input of `len` bytes: runs of text, of repeated
    /// records and of noise (an LCG, so it is the same everywhere), so
    /// blocks compress unevenly and matches cross the cuts.
    fn mixed(len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            x >> 33
        };
        while out.len() < len {
            match next() % 3 {
                0 => {
                    for _ in 0..next() % 400 {
                        let word = ["usr", "lib", "share", "bin", "etc", "python3", "go", "\n"];
                        out.extend_from_slice(word[next() as usize % word.len()].as_bytes());
                        out.push(b'/');
                    }
                }
                1 => {
                    let record = format!("{:08x} sunaba layer record\n", next() % 64);
                    for _ in 0..next() % 200 {
                        out.extend_from_slice(record.as_bytes());
                    }
                }
                _ => {
                    for _ in 0..next() % 4096 {
                        out.push(next() as u8);
                    }
                }
            }
        }
        out.truncate(len);
        out
    }

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut back = Vec::new();
        // One member: the single-member decoder reads all of it.
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut back)
            .unwrap();
        back
    }

    /// Hands out at most `step` bytes per read, like a pipe.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn the_bytes_are_the_same_at_1_2_and_8_threads_and_gzip_reads_them_as_one_member() {
        let layer = mixed(5 * BLOCK + 12_345);
        let mut one = Vec::new();
        let first = gzip_with(layer.as_slice(), &mut one, 1).unwrap();
        for threads in [2, 8] {
            let mut again = Vec::new();
            let got = gzip_with(layer.as_slice(), &mut again, threads).unwrap();
            assert_eq!(got, first, "{threads} threads");
            assert!(again == one, "{threads} threads gave other bytes");
        }
        // However the input arrives: blocks are cut at fixed offsets.
        let mut trickled = Vec::new();
        let step = Trickle {
            data: &layer,
            step: 65_521,
        };
        assert_eq!(gzip_with(step, &mut trickled, 2).unwrap(), first);
        assert!(trickled == one);
        assert_eq!(gunzip(&one), layer);
        // gzip itself: one member, CRC and size right.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("layer.tar.gz");
        std::fs::write(&path, &one).unwrap();
        let test = std::process::Command::new("gzip")
            .arg("-tv")
            .arg(&path)
            .output()
            .expect("gzip (to check the stream) is installed");
        assert!(test.status.success(), "{test:?}");
        let list = std::process::Command::new("gzip")
            .arg("-lv")
            .arg(&path)
            .output()
            .unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        let crc = format!("{:08x}", crc32fast::hash(&layer));
        assert!(list.contains(&crc), "{list}");
        assert!(list.contains(&layer.len().to_string()), "{list}");
    }

    #[test]
    fn block_edges_compress_and_read_back_at_any_thread_count() {
        for len in [0, 1, DICTIONARY, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK] {
            let layer = mixed(len);
            let mut one = Vec::new();
            let first = gzip_with(layer.as_slice(), &mut one, 1).unwrap();
            let mut three = Vec::new();
            assert_eq!(gzip_with(layer.as_slice(), &mut three, 3).unwrap(), first);
            assert!(one == three, "{len} bytes");
            assert_eq!(gunzip(&one), layer, "{len} bytes");
            assert_eq!(first.size, one.len() as u64);
        }
    }

    /// The layer is streamed: when the first compressed block is written,
    /// the reader is at most the window (and one block of look-ahead) in,
    /// not through a 96 MiB layer.
    #[test]
    fn a_large_layer_is_streamed_through_a_bounded_window() {
        use std::sync::atomic::{AtomicU64, Ordering};
        struct Counted<'a>(std::io::Take<std::io::Repeat>, &'a AtomicU64);
        impl Read for Counted<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.0.read(buf)?;
                self.1.fetch_add(n as u64, Ordering::SeqCst);
                Ok(n)
            }
        }
        struct Watch<'a> {
            read: &'a AtomicU64,
            at_first_block: Option<u64>,
            writes: usize,
        }
        impl Write for Watch<'_> {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.writes += 1;
                // The first write is the header; the second the first block.
                if self.writes == 2 {
                    self.at_first_block = Some(self.read.load(Ordering::SeqCst));
                }
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let read = AtomicU64::new(0);
        let len = 96 * BLOCK as u64;
        let mut watch = Watch {
            read: &read,
            at_first_block: None,
            writes: 0,
        };
        let threads = 2;
        gzip_with(
            Counted(std::io::repeat(b'x').take(len), &read),
            &mut watch,
            threads,
        )
        .unwrap();
        assert_eq!(read.load(Ordering::SeqCst), len);
        let window = 2 * threads as u64 + 2;
        let seen = watch.at_first_block.unwrap();
        assert!(
            seen <= (window + 1) * BLOCK as u64,
            "{seen} bytes read before the first block was written"
        );
    }

    #[test]
    fn the_thread_count_comes_from_the_environment_only_when_it_is_a_count() {
        assert_eq!(parse_threads("2").unwrap(), 2);
        assert_eq!(parse_threads(" 8\n").unwrap(), 8);
        for bad in ["0", "65", "-1", "two", "", "1e3"] {
            let e = parse_threads(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains(THREADS_ENV), "{e}");
        }
        let e = parse_threads("\u{1b}[31m").unwrap_err().to_string();
        assert!(!e.contains('\u{1b}'), "{e}");
    }

    /// A golden digest: it moves only when the compressor does, and then
    /// every released layer's digest moves with it — bump [`COMPRESSOR`]
    /// (and say so in the release notes) rather than bless this silently.
    #[test]
    fn the_compressor_is_the_pinned_one() {
        let small = b"sunaba layer\n".repeat(10_000);
        let got = gzip_with(small.as_slice(), std::io::sink(), 1).unwrap();
        // Several blocks: the cut, the dictionary and the flushes are in it.
        // The same digest at every thread count.
        let large = mixed(3 * BLOCK + 777);
        for threads in [1, 2, 8] {
            let got_large = gzip_with(large.as_slice(), std::io::sink(), threads).unwrap();
            assert_eq!(
                [
                    (got.digest.as_str(), got.size),
                    (got_large.digest.as_str(), got_large.size)
                ],
                [
                    (
                        "sha256:14b7ec2f99a0453fe87dbc3689e02b7fede9b281799cbb5855de8a5c020fe3b6",
                        749
                    ),
                    (
                        "sha256:dee476115f32917dd3a2353e8f30919c04b0698d69c71617ee1a186473aac29f",
                        1_196_905
                    )
                ],
                "the compressor's output changed ({threads} threads)"
            );
        }
        let lock = include_str!("../../Cargo.lock");
        let version = |name: &str| {
            lock.split("\n[[package]]\n")
                .find(|p| p.starts_with(&format!("name = \"{name}\"\n")))
                .and_then(|p| p.lines().nth(1))
                .map(|v| {
                    v.trim_start_matches("version = ")
                        .trim_matches('"')
                        .to_string()
                })
                .unwrap_or_else(|| panic!("{name} in Cargo.lock"))
        };
        assert_eq!(
            format!("pgzip-1m-6-zlib_rs-{}", version("zlib-rs")),
            COMPRESSOR
        );
        assert_eq!(BLOCK, 1 << 20, "the block size is in COMPRESSOR's name");
    }
}
