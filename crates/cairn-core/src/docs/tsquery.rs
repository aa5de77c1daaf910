//! A doc search query, written in SQLite FTS5's syntax (what the SQLite registry's index reads),
//! as a PostgreSQL `tsquery`, so a search means the same on either registry: terms (implicitly
//! AND-ed), `"phrases"`, `prefix*`, `AND`, `OR`, `NOT`, parentheses and column filters (`name:`,
//! `title:`, `text:`, `{name title}:`). FTS5's `NEAR(…)` and `^` are refused by name. A query
//! FTS5 would refuse is refused with FTS5's own words (`fts5: syntax error near "…"`).
//!
//! Terms are split as FTS5's `unicode61` tokenizer splits them (on anything not a letter or a
//! digit) and lowercased; the PostgreSQL registry folds diacritics on both sides in SQL.

/// The columns of the doc index and the `tsquery` weight each is indexed under.
const COLUMNS: [(&str, char); 3] = [("name", 'A'), ("title", 'B'), ("text", 'D')];

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Star,
    Colon,
    LParen,
    RParen,
    LBrace,
    RBrace,
    Plus,
    Caret,
    And,
    Or,
    Not,
    Near,
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::Word(w) => w.clone(),
            Token::Quoted(q) => format!("\"{q}\""),
            Token::Star => "*".into(),
            Token::Colon => ":".into(),
            Token::LParen => "(".into(),
            Token::RParen => ")".into(),
            Token::LBrace => "{".into(),
            Token::RBrace => "}".into(),
            Token::Plus => "+".into(),
            Token::Caret => "^".into(),
            Token::And => "AND".into(),
            Token::Or => "OR".into(),
            Token::Not => "NOT".into(),
            Token::Near => "NEAR".into(),
        }
    }
}

fn syntax_error(near: &str) -> String {
    format!("fts5: syntax error near \"{near}\"")
}

/// FTS5's bareword characters: ASCII letters, digits and `_`, and every non-ASCII character.
fn bareword_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || !c.is_ascii() || c == '\u{1a}'
}

fn tokenize(query: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut chars = query.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let token = match c {
            c if c.is_whitespace() => continue,
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        // `""` inside a string is one quote.
                        Some((_, '"')) if chars.peek().is_some_and(|(_, c)| *c == '"') => {
                            chars.next();
                            s.push('"');
                        }
                        Some((_, '"')) => break,
                        Some((_, c)) => s.push(c),
                        None => return Err(syntax_error(&query[at..])),
                    }
                }
                Token::Quoted(s)
            }
            '*' => Token::Star,
            ':' => Token::Colon,
            '(' => Token::LParen,
            ')' => Token::RParen,
            '{' => Token::LBrace,
            '}' => Token::RBrace,
            '+' => Token::Plus,
            '^' => Token::Caret,
            c if bareword_char(c) => {
                let mut w = String::from(c);
                while let Some((_, c)) = chars.peek().copied().filter(|(_, c)| bareword_char(*c)) {
                    w.push(c);
                    chars.next();
                }
                match w.as_str() {
                    "AND" => Token::And,
                    "OR" => Token::Or,
                    "NOT" => Token::Not,
                    "NEAR" if chars.peek().is_some_and(|(_, c)| *c == '(') => Token::Near,
                    _ => Token::Word(w),
                }
            }
            other => return Err(syntax_error(&other.to_string())),
        };
        tokens.push(token);
    }
    Ok(tokens)
}

/// The lexemes of a term as the index splits it.
fn lexemes(term: &str) -> Vec<String> {
    term.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn error_here(&self) -> String {
        syntax_error(&self.peek().map(Token::text).unwrap_or_default())
    }

    /// The error for the token just read, which does not fit where it stands.
    fn unexpected(&mut self) -> String {
        self.at -= 1;
        self.error_here()
    }

    /// `or := and (OR and)*`
    fn or(&mut self, weights: &str) -> Result<String, String> {
        let mut parts = vec![self.and(weights)?];
        while self.peek() == Some(&Token::Or) {
            self.next();
            parts.push(self.and(weights)?);
        }
        Ok(join(parts, " | "))
    }

    /// `and := not ([AND] not)*`: juxtaposition is AND.
    fn and(&mut self, weights: &str) -> Result<String, String> {
        let mut parts = vec![self.not(weights)?];
        loop {
            match self.peek() {
                Some(Token::And) => {
                    self.next();
                    parts.push(self.not(weights)?);
                }
                Some(
                    Token::Word(_) | Token::Quoted(_) | Token::LParen | Token::LBrace | Token::Caret | Token::Near,
                ) => parts.push(self.not(weights)?),
                _ => break,
            }
        }
        Ok(join(parts, " & "))
    }

    /// `not := primary (NOT primary)*`: `a NOT b` is `a` without `b`.
    fn not(&mut self, weights: &str) -> Result<String, String> {
        let mut out = self.primary(weights)?;
        while self.peek() == Some(&Token::Not) {
            self.next();
            let rhs = self.primary(weights)?;
            out = format!("({out} & !{rhs})");
        }
        Ok(out)
    }

    fn primary(&mut self, weights: &str) -> Result<String, String> {
        match self.next() {
            Some(Token::LParen) => {
                let inner = self.or(weights)?;
                match self.next() {
                    // Every compound part is parenthesized already.
                    Some(Token::RParen) => Ok(inner),
                    _ => Err(self.unexpected()),
                }
            }
            Some(Token::LBrace) => {
                let mut names = Vec::new();
                loop {
                    match self.next() {
                        Some(Token::Word(w)) => names.push(w),
                        Some(Token::RBrace) => break,
                        _ => {
                            return Err(self.unexpected());
                        }
                    }
                }
                match self.next() {
                    Some(Token::Colon) => {}
                    _ => {
                        return Err(self.unexpected());
                    }
                }
                let w = column_weights(&names)?;
                self.primary(&w)
            }
            Some(Token::Word(w)) if self.peek() == Some(&Token::Colon) => {
                self.next();
                let w = column_weights(&[w])?;
                self.primary(&w)
            }
            Some(Token::Word(w)) => self.phrase(w, weights),
            Some(Token::Quoted(q)) => self.phrase(q, weights),
            Some(Token::Caret) => {
                Err("`^` (a term at the start of a column) is not supported by the PostgreSQL registry's doc search"
                    .into())
            }
            Some(Token::Near) => {
                Err("`NEAR(…)` is not supported by the PostgreSQL registry's doc search; search the terms with AND"
                    .into())
            }
            Some(_) => Err(self.unexpected()),
            None => Err(syntax_error("")),
        }
    }

    /// A phrase: a term or string, then `+ term`… and an optional `*` (a prefix).
    fn phrase(&mut self, first: String, weights: &str) -> Result<String, String> {
        let mut words = lexemes(&first);
        while self.peek() == Some(&Token::Plus) {
            self.next();
            match self.next() {
                Some(Token::Word(w) | Token::Quoted(w)) => words.extend(lexemes(&w)),
                _ => {
                    return Err(self.unexpected());
                }
            }
        }
        let prefix = self.peek() == Some(&Token::Star);
        if prefix {
            self.next();
        }
        if words.is_empty() {
            // A string with no letters or digits matches nothing, as in FTS5.
            return Ok("!''".to_string());
        }
        let n = words.len();
        let lexemes: Vec<String> = words
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                let star = if prefix && i + 1 == n { "*" } else { "" };
                let marks = format!("{star}{weights}");
                if marks.is_empty() { format!("'{w}'") } else { format!("'{w}':{marks}") }
            })
            .collect();
        Ok(if n == 1 { lexemes.concat() } else { format!("({})", lexemes.join(" <-> ")) })
    }
}

fn column_weights(names: &[String]) -> Result<String, String> {
    names
        .iter()
        .map(|n| {
            COLUMNS
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(n))
                .map(|(_, w)| *w)
                .ok_or_else(|| format!("no such column: {n}"))
        })
        .collect()
}

fn join(parts: Vec<String>, op: &str) -> String {
    if parts.len() == 1 { parts.into_iter().next().unwrap_or_default() } else { format!("({})", parts.join(op)) }
}

/// `query` (FTS5's syntax) as a `tsquery`; the error is what FTS5 would say, or names what the
/// PostgreSQL registry does not support.
pub fn fts5_to_tsquery(query: &str) -> Result<String, String> {
    let mut p = Parser { tokens: tokenize(query)?, at: 0 };
    if p.tokens.is_empty() {
        return Err(syntax_error(""));
    }
    let out = p.or("")?;
    match p.peek() {
        None => Ok(out),
        Some(_) => Err(p.error_here()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fts5_forms_become_their_tsquery() {
        for (fts5, tsquery) in [
            ("pca", "'pca'"),
            ("PCA clustering", "('pca' & 'clustering')"),
            ("pca AND genes", "('pca' & 'genes')"),
            ("pca OR genes", "('pca' | 'genes')"),
            ("pca NOT genes", "('pca' & !'genes')"),
            ("\"few genes\"", "('few' <-> 'genes')"),
            ("\"k-means\"", "('k' <-> 'means')"),
            ("clust*", "'clust':*"),
            ("\"few gen\"*", "('few' <-> 'gen':*)"),
            ("a + b", "('a' <-> 'b')"),
            ("(a OR b) c", "(('a' | 'b') & 'c')"),
            ("a OR b c", "('a' | ('b' & 'c'))"),
            ("title: pca", "'pca':B"),
            ("{name title}: pca*", "'pca':*AB"),
            ("Café", "'café'"),
            ("\"say \"\"hi\"\"\"", "('say' <-> 'hi')"),
            ("and or not", "('and' & 'or' & 'not')"),
            ("\"...\"", "!''"),
        ] {
            assert_eq!(fts5_to_tsquery(fts5).as_deref(), Ok(tsquery), "{fts5}");
        }
    }

    #[test]
    fn what_fts5_refuses_is_refused_with_its_words() {
        for (bad, says) in [
            ("\"unbalanced", "syntax error near \"\"unbalanced\""),
            ("AND OR", "syntax error near \"AND\""),
            ("nocolumn: x", "no such column: nocolumn"),
            ("(a", "syntax error near \"\""),
            ("a AND", "syntax error near \"\""),
            ("*", "syntax error near \"*\""),
            ("a-b", "syntax error near \"-\""),
            ("a)", "syntax error near \")\""),
            ("", "syntax error near \"\""),
            ("{name}", "syntax error near \"\""),
        ] {
            let e = fts5_to_tsquery(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(fts5_to_tsquery("NEAR(a b)").unwrap_err().contains("NEAR"));
        assert!(fts5_to_tsquery("^a").unwrap_err().contains('^'));
    }
}
