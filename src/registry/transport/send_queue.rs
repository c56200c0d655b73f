//! How many bytes this process's connections to a port still hold unsent
//! or unacknowledged: what the kernel has taken of request bodies but not
//! yet moved.
//!
//! A request body is "sent" for [`super::idle`] once hyper has handed its
//! last byte to the socket, but the socket's send buffer grows to
//! megabytes (and a slow link drains it at its own rate): a 2 MiB layer
//! over a 100 kbit/s link sits in the buffer for almost three minutes after
//! the last byte was handed over. While that queue shrinks the body is
//! still moving, and the wait for the answer must not count it. reqwest
//! does not say which socket a request went out on, so this sums the
//! queues of every socket of the process connected to the registry's port
//! (`SIOCOUTQ` on each descriptor in `/proc/self/fd` whose peer has that
//! port). It is used only to lengthen a wait while something drains, never
//! to shorten one, so a neighbour's upload to the same port can at worst
//! keep a wait going while it moves.

/// The bytes queued on this process's TCP sockets whose peer has `port`,
/// or `None` when there is no such socket or this system cannot say.
#[cfg(target_os = "linux")]
pub(crate) fn queued_to(port: u16) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut total = None;
    for entry in std::fs::read_dir("/proc/self/fd").ok()?.flatten() {
        let Some(fd) = (entry.file_name().to_str()).and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str().as_bytes().starts_with(b"socket:"));
        if !is_socket || peer_port(fd) != Some(port) {
            continue;
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: an ioctl that writes one int through the pointer given;
        // on a descriptor closed (or reused) since it was listed, it fails
        // or answers for another socket, which only misjudges a wait.
        if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) } == 0 && queued >= 0 {
            *total.get_or_insert(0) += queued as u64;
        }
    }
    total
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn queued_to(_port: u16) -> Option<u64> {
    None
}

/// The port of the peer `fd` is connected to (IPv4 or IPv6).
#[cfg(target_os = "linux")]
fn peer_port(fd: i32) -> Option<u16> {
    // SAFETY: a zeroed sockaddr_storage is a valid value, and getpeername
    // writes at most `len` bytes into it.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let got =
        unsafe { libc::getpeername(fd, (&raw mut addr).cast::<libc::sockaddr>(), &raw mut len) };
    if got != 0 {
        return None;
    }
    // SAFETY: the family says which sockaddr the storage holds, and the
    // storage is large enough and aligned for every one of them.
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            let v4 = unsafe { &*(&raw const addr).cast::<libc::sockaddr_in>() };
            Some(u16::from_be(v4.sin_port))
        }
        libc::AF_INET6 => {
            let v6 = unsafe { &*(&raw const addr).cast::<libc::sockaddr_in6>() };
            Some(u16::from_be(v6.sin6_port))
        }
        _ => None,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn bytes_a_peer_has_not_taken_are_counted_until_it_reads_them() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(queued_to(port), None, "no socket to the port yet");
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert_eq!(queued_to(port), Some(0));
        // Write until the peer's window and our buffer are full: the
        // server reads nothing meanwhile.
        client.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 64 << 10];
        let mut written = 0u64;
        loop {
            match client.write(&chunk) {
                Ok(n) => written += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let queued = queued_to(port).unwrap();
        assert!(
            queued > 0 && queued <= written,
            "{queued} queued of {written} written"
        );
        // The server takes everything: the queue empties.
        let mut got = vec![0u8; written as usize];
        server.read_exact(&mut got).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while queued_to(port) != Some(0) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(queued_to(port), Some(0));
    }
}
