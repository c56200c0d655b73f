//! An error and its causes as one line of text, for the errors that keep a
//! lower layer's error as a reason string (the registry client's, the
//! package indexes').

/// `e` and its sources, each cause once ("error sending request: connection
/// refused"), for messages.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(cause) = src {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        src = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("error sending request")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("request failed: connection refused")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn each_cause_once() {
        let refused = || std::io::Error::other("connection refused");
        assert_eq!(
            error_chain(&Outer(refused())),
            "error sending request: connection refused"
        );
        assert_eq!(
            error_chain(&Repeats(refused())),
            "request failed: connection refused"
        );
    }
}
