//! `WWW-Authenticate` parsing (RFC 7235): one header value may hold several
//! challenges (`Basic realm="x", Bearer realm="y",service="z"`), values may
//! be quoted strings with commas and escaped quotes; of the challenges a
//! registry offers, Bearer (with a realm) is answered before Basic.

use std::collections::BTreeMap;

/// A challenge this client can answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// One challenge as written: its scheme (lowercased) and parameters (names
/// lowercased), or the token68 some schemes carry instead.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RawChallenge {
    pub scheme: String,
    pub params: BTreeMap<String, String>,
    pub token68: Option<String>,
}

/// The challenge to answer among those in `header`: Bearer with a realm
/// first, else Basic; `None` when there is none this client can answer or
/// the header does not parse. (Responses go through [`preferred`], which
/// looks at every header line.)
#[cfg(test)]
pub(crate) fn parse_challenge(header: &str) -> Option<Challenge> {
    preferred(std::iter::once(header))
}

/// Like [`parse_challenge`], over every `WWW-Authenticate` line of a
/// response.
pub(crate) fn preferred<'a>(headers: impl IntoIterator<Item = &'a str>) -> Option<Challenge> {
    let mut basic = false;
    for header in headers {
        for raw in parse_challenges(header).unwrap_or_default() {
            match raw.scheme.as_str() {
                "bearer" => {
                    let mut params = raw.params;
                    if let Some(realm) = params.remove("realm") {
                        return Some(Challenge::Bearer {
                            realm,
                            service: params.remove("service"),
                            scope: params.remove("scope"),
                        });
                    }
                }
                "basic" => basic = true,
                _ => {}
            }
        }
    }
    basic.then_some(Challenge::Basic)
}

/// Every challenge in one header value, in order. An error says where the
/// value stops making sense.
pub(crate) fn parse_challenges(header: &str) -> Result<Vec<RawChallenge>, String> {
    let mut c = Cursor { s: header, pos: 0 };
    let mut out = Vec::new();
    loop {
        c.skip_list_separators();
        if c.at_end() {
            return Ok(out);
        }
        let scheme = c.token();
        if scheme.is_empty() {
            return Err(c.unexpected("an authentication scheme"));
        }
        let mut challenge = RawChallenge {
            scheme: scheme.to_ascii_lowercase(),
            ..RawChallenge::default()
        };
        let spaced = c.skip_space();
        if !c.at_end() && c.peek() != Some(',') {
            if !spaced {
                return Err(c.unexpected("a space after the scheme"));
            }
            c.challenge_body(&mut challenge)?;
        }
        out.push(challenge);
    }
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

/// RFC 7230 `tchar`.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

/// RFC 7235 `token68` characters (before the trailing `=`s).
fn is_token68_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~+/".contains(c)
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }
    fn at_end(&self) -> bool {
        self.pos >= self.s.len()
    }
    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }
    fn bump(&mut self) {
        if let Some(ch) = self.peek() {
            self.pos += ch.len_utf8();
        }
    }
    fn unexpected(&self, wanted: &str) -> String {
        match self.peek() {
            Some(ch) => format!("expected {wanted} at byte {}, found {ch:?}", self.pos),
            None => format!("expected {wanted} at the end"),
        }
    }
    /// Skips spaces and tabs; whether there were any.
    fn skip_space(&mut self) -> bool {
        let start = self.pos;
        while matches!(self.peek(), Some(' ' | '\t')) {
            self.bump();
        }
        self.pos > start
    }
    /// Skips the empty list elements RFC 7230 allows (`, ,`).
    fn skip_list_separators(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | ',')) {
            self.bump();
        }
    }
    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(&f) {
            self.bump();
        }
        &self.s[start..self.pos]
    }
    fn token(&mut self) -> &'a str {
        self.take_while(is_tchar)
    }

    /// After `token *SP`: whether an `=` follows that starts a parameter
    /// value (not the `=` padding of a token68).
    fn at_param_name(&self) -> bool {
        let mut probe = Cursor {
            s: self.s,
            pos: self.pos,
        };
        if probe.token().is_empty() {
            return false;
        }
        probe.skip_space();
        if probe.peek() != Some('=') {
            return false;
        }
        probe.bump();
        probe.skip_space();
        !matches!(probe.peek(), None | Some(',' | '='))
    }

    /// The token68 or parameter list after a scheme and its space.
    fn challenge_body(&mut self, challenge: &mut RawChallenge) -> Result<(), String> {
        if !self.at_param_name() {
            let start = self.pos;
            self.take_while(is_token68_char);
            self.take_while(|c| c == '=');
            if self.pos == start {
                return Err(self.unexpected("a parameter or token68"));
            }
            challenge.token68 = Some(self.s[start..self.pos].to_string());
            self.skip_space();
            return self.end_of_challenge();
        }
        loop {
            let name = self.token().to_ascii_lowercase();
            self.skip_space();
            self.bump(); // '=', as at_param_name saw
            self.skip_space();
            let value = if self.peek() == Some('"') {
                self.quoted()?
            } else {
                // Registries send unquoted URLs (`realm=https://…`), which
                // are not RFC tokens: a bare value runs to `,` or space.
                self.take_while(|c| !matches!(c, ',' | ' ' | '\t'))
                    .to_string()
            };
            // RFC 7235: a parameter name occurs once; the first counts.
            challenge.params.entry(name).or_insert(value);
            self.skip_space();
            self.end_of_challenge()?;
            if self.at_end() {
                return Ok(());
            }
            // At a comma: another parameter of this challenge, or the
            // next challenge's scheme.
            let mark = self.pos;
            self.skip_list_separators();
            if !self.at_param_name() {
                self.pos = mark;
                return Ok(());
            }
        }
    }

    fn end_of_challenge(&self) -> Result<(), String> {
        match self.peek() {
            None | Some(',') => Ok(()),
            Some(_) => Err(self.unexpected("',' or the end")),
        }
    }

    /// A quoted string, at its opening quote; backslash escapes any char.
    fn quoted(&mut self) -> Result<String, String> {
        let open = self.pos;
        self.bump();
        let mut value = String::new();
        while let Some(ch) = self.peek() {
            self.bump();
            match ch {
                '"' => return Ok(value),
                '\\' => match self.peek() {
                    Some(escaped) => {
                        value.push(escaped);
                        self.bump();
                    }
                    None => break,
                },
                ch => value.push(ch),
            }
        }
        Err(format!("the quoted string at byte {open} is not closed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges() {
        assert_eq!(
            parse_challenge(
                r#"Bearer realm="https://auth.example/token",service="reg",scope="repository:a/b:pull""#
            ),
            Some(Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("reg".into()),
                scope: Some("repository:a/b:pull".into())
            })
        );
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            parse_challenge(r#"bearer realm=http://x/t, service="a,b""#),
            Some(Challenge::Bearer {
                realm: "http://x/t".into(),
                service: Some("a,b".into()),
                scope: None
            })
        );
        assert_eq!(parse_challenge("Negotiate"), None);
        assert_eq!(
            parse_challenge("Bearer service=\"x\""),
            None,
            "realm is required"
        );
    }

    fn raw(scheme: &str, params: &[(&str, &str)]) -> RawChallenge {
        RawChallenge {
            scheme: scheme.into(),
            params: params
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            token68: None,
        }
    }

    #[test]
    fn several_challenges_in_one_header() {
        let h = r#"Basic realm="x", Bearer realm="y",service="z""#;
        assert_eq!(
            parse_challenges(h).unwrap(),
            vec![
                raw("basic", &[("realm", "x")]),
                raw("bearer", &[("realm", "y"), ("service", "z")])
            ]
        );
        assert_eq!(
            parse_challenge(h),
            Some(Challenge::Bearer {
                realm: "y".into(),
                service: Some("z".into()),
                scope: None
            }),
            "Bearer is preferred over Basic, wherever it is"
        );
        let h = r#"Negotiate abc==, Basic realm=x , ,Bearer realm="a\"b,c", scope="s""#;
        let all = parse_challenges(h).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].token68.as_deref(), Some("abc=="));
        assert_eq!(all[1], raw("basic", &[("realm", "x")]));
        assert_eq!(
            all[2],
            raw("bearer", &[("realm", "a\"b,c"), ("scope", "s")])
        );
        assert_eq!(
            parse_challenges("Basic, Bearer").unwrap(),
            vec![raw("basic", &[]), raw("bearer", &[])]
        );
        assert_eq!(
            parse_challenge(r#"Bearer service="x", Basic realm="r""#),
            Some(Challenge::Basic),
            "a Bearer without realm cannot be answered"
        );
    }

    #[test]
    fn preference_spans_header_lines() {
        assert_eq!(
            preferred([r#"Basic realm="r""#, r#"Bearer realm="t""#]),
            Some(Challenge::Bearer {
                realm: "t".into(),
                service: None,
                scope: None
            })
        );
        assert_eq!(preferred(["Negotiate", "Basic"]), Some(Challenge::Basic));
        assert_eq!(preferred([]), None);
    }

    #[test]
    fn malformed_headers_are_errors_not_guesses() {
        for bad in [
            r#"Bearer realm="open"#,
            r#"Bearer realm="x" junk"#,
            "Bearer\"x\"",
            "=x",
            r#"Bearer realm="x\"#,
        ] {
            assert!(parse_challenges(bad).is_err(), "{bad}");
            assert_eq!(parse_challenge(bad), None, "{bad}");
        }
        assert_eq!(parse_challenges("").unwrap(), vec![]);
        assert_eq!(
            parse_challenges(r#"Bearer realm="é,ü""#).unwrap()[0].params["realm"],
            "é,ü"
        );
    }
}
