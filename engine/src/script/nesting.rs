//! A bound on how deeply a script nests, checked before the parser sees it.
//!
//! The parser, the type strip and the code generator are recursive: a
//! script such as `return [[[[…]]]]` 20,000 deep, 200,000 parentheses or a
//! chain of arrows `x => x => x => …` overflows the host's stack, which is
//! an abort, not an error anyone can report. So one linear scan estimates
//! the deepest recursion the script can cause and refuses more than
//! [`MAX_NESTING`] levels with a `SCRIPT_PARSE` error at the place it
//! happens. The engine itself stops far earlier (QuickJS reports "Maximum
//! call stack size exceeded" a few thousand levels deep), so no script that
//! could run is refused.
//!
//! The scan is a small lexer, not a parser: it skips comments, strings,
//! template text and regular expressions (a `/` starts one where a value
//! is expected, as in every JavaScript lexer), and counts
//! - brackets `(` `[` `{` and type arguments `<` as levels, and
//! - the tokens that make the grammar recurse without a bracket — prefix
//!   operators (`!`, `~`, `typeof`, `await`, `new`, …), `=>`, `?`,
//!   assignments, `**` — as one level each until the next `,` or `;` of
//!   the same bracket, or its closing.
//!
//! It errs towards counting more (a `<` that was a comparison, an operator
//! that was not nested): the estimate only has to be an upper bound of what
//! the parser's recursion can reach, and real scripts stay far below the
//! limit.

use super::diagnostic::Located;

/// Deepest nesting accepted: far above what a real workflow needs, far
/// below what the host's stack holds (the preparation runs on a thread
/// with [`PREPARE_STACK`] of stack when a script nests deeper than
/// [`INLINE_NESTING`]).
pub(crate) const MAX_NESTING: usize = 1000;

/// Scripts that nest at most this deep are prepared on the caller's
/// thread (any tokio worker has room for that).
pub(crate) const INLINE_NESTING: usize = 100;

/// Stack of the thread that prepares a deeply nesting script: a generous
/// bound for [`MAX_NESTING`] levels even in a debug build.
pub(crate) const PREPARE_STACK: usize = 256 << 20;

/// One open level: its bracket (or none for the top) and the chain tokens
/// counted in it since its last `,` or `;`.
struct Level {
    bracket: u8,
    chain: usize,
}

/// Where a `/` would start a regular expression: after an operator, an
/// opening bracket, a keyword that precedes an expression, or at the start.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Slash {
    Regex,
    Divide,
}

/// The deepest nesting the scan finds, or where it passes [`MAX_NESTING`].
pub(crate) fn check(source: &str) -> Result<usize, Located> {
    let mut scan = Scan::new(source.as_bytes());
    while scan.i < scan.b.len() {
        scan.step()?;
    }
    Ok(scan.deepest)
}

/// The scan's state, from the start of the script to `i`.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
    stack: Vec<Level>,
    /// Sum over `stack` of (1 per bracket + its chain tokens), kept current.
    depth: usize,
    deepest: usize,
    slash: Slash,
    /// A line break since the last token: where a value ends a line and a
    /// word starts the next, automatic semicolon insertion ends the
    /// statement, and with it the chain.
    line_break: bool,
}

impl<'a> Scan<'a> {
    fn new(b: &'a [u8]) -> Self {
        Scan {
            b,
            i: 0,
            stack: vec![Level {
                bracket: 0,
                chain: 0,
            }],
            depth: 0,
            deepest: 0,
            slash: Slash::Regex,
            line_break: false,
        }
    }

    /// Scans the token (or blank) at `i` and moves past it.
    fn step(&mut self) -> Result<(), Located> {
        let b = self.b;
        let i = self.i;
        let c = b[i];
        if c == b'\n' {
            self.line_break = true;
            self.i += 1;
            return Ok(());
        }
        if c == b' ' || c == b'\t' || c == b'\r' {
            self.i += 1;
            return Ok(());
        }
        if std::mem::take(&mut self.line_break)
            && self.slash == Slash::Divide
            && starts_statement(b, i)
        {
            self.end_chain();
        }
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                self.i = skip_line(b, i);
                self.line_break = true;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => self.i = skip_block_comment(b, i),
            b'/' if self.slash == Slash::Regex => {
                self.i = skip_regex(b, i);
                self.slash = Slash::Divide;
            }
            b'\'' | b'"' => {
                self.i = skip_string(b, i);
                self.slash = Slash::Divide;
            }
            b'`' => {
                self.open(b'`', i + 1)?;
                self.template_text(i + 1)?;
            }
            b'(' | b'[' | b'{' => {
                self.open(c, i)?;
                self.slash = Slash::Regex;
                self.i += 1;
            }
            b'<' if matches!(b.get(i + 1), Some(b'=' | b'<')) => {
                // `<=`, `<<`, `<<=`: operators.
                self.i += if b.get(i + 2) == Some(&b'=') { 3 } else { 2 };
                self.slash = Slash::Regex;
            }
            b'<' => {
                // A type argument list or a comparison: counted either way.
                self.open(b'<', i)?;
                self.slash = Slash::Regex;
                self.i += 1;
            }
            b')' | b']' | b'}' | b'>' => self.closer(c)?,
            b',' => {
                self.end_chain();
                self.slash = Slash::Regex;
                self.i += 1;
            }
            b';' => {
                // A statement ends: `<`s still open were comparisons.
                while self.stack.len() > 1 && self.stack.last().is_some_and(|l| l.bracket == b'<') {
                    self.close();
                }
                self.end_chain();
                self.slash = Slash::Regex;
                self.i += 1;
            }
            b'=' | b'?' | b'!' | b'~' | b'*' | b'+' | b'-' => self.operator(c)?,
            c if c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80 => self.word()?,
            c if c.is_ascii_digit() => {
                let mut i = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_')
                {
                    i += 1;
                }
                self.i = i;
                self.slash = Slash::Divide;
            }
            _ => {
                self.slash = Slash::Regex;
                self.i += 1;
            }
        }
        Ok(())
    }

    /// `)`, `]`, `}` or `>` at `i`: closes its level, or ends a template
    /// expression, or is the operator `>=`.
    fn closer(&mut self, c: u8) -> Result<(), Located> {
        let b = self.b;
        let i = self.i;
        let open = match c {
            b')' => b'(',
            b']' => b'[',
            b'}' => b'{',
            _ => b'<',
        };
        if c == b'>' && b.get(i + 1) == Some(&b'=') {
            // `>=`: an operator, not a closing.
            self.i += 2;
            self.slash = Slash::Regex;
            return Ok(());
        }
        if c == b'}' && self.stack.last().is_some_and(|l| l.bracket == b'$') {
            // The end of a template expression: back into its text.
            self.close();
            return self.template_text(i + 1);
        }
        // Close up to the matching opener; `<`s left open on the way
        // were comparisons. A closer with no opener is ignored.
        if let Some(pos) = self.stack.iter().rposition(|l| l.bracket == open)
            && pos > 0
        {
            for level in self.stack.drain(pos..) {
                self.depth -= 1 + level.chain;
            }
        }
        self.slash = if c == b'>' {
            Slash::Regex
        } else {
            Slash::Divide
        };
        self.i += 1;
        Ok(())
    }

    /// An operator starting with `=`, `?`, `!`, `~`, `*`, `+` or `-` at `i`:
    /// one chain level if it makes the grammar recurse, none if it is flat.
    fn operator(&mut self, c: u8) -> Result<(), Located> {
        let b = self.b;
        let i = self.i;
        let next = b.get(i + 1).copied();
        match c {
            b'=' if next == Some(b'>') => {
                self.chain(i)?;
                self.i += 2;
            }
            b'=' | b'!' if next == Some(b'=') => {
                self.i += if b.get(i + 2) == Some(&b'=') { 3 } else { 2 };
            }
            b'!' if self.slash == Slash::Divide => {
                // TypeScript's non-null assertion `x!`: postfix, flat.
                self.i += 1;
                return Ok(());
            }
            b'?' if matches!(next, Some(b'?' | b'.')) => {
                // `??` (flat) and `?.` (a member access).
                self.i += 2;
            }
            b'=' | b'?' | b'!' | b'~' => {
                self.chain(i)?;
                self.i += 1;
            }
            b'*' if next == Some(b'*') => {
                self.chain(i)?;
                self.i += 2;
            }
            b'+' | b'-' => {
                // Where a value is expected these are prefix operators
                // (`-x`, `++x`), which recurse; after one, binary or
                // postfix, which do not.
                let doubled = next == Some(c);
                if self.slash == Slash::Regex {
                    self.chain(i)?;
                }
                self.i += if doubled { 2 } else { 1 };
                if doubled {
                    return Ok(());
                }
            }
            // A lone `*`: multiplication (or a generator's star), flat.
            _ => self.i += 1,
        }
        self.slash = Slash::Regex;
        Ok(())
    }

    /// A word at `i`: a prefix keyword (`typeof`, `await`, …) is a chain
    /// level; whether a `/` after it divides depends on the word.
    fn word(&mut self) -> Result<(), Located> {
        let b = self.b;
        let start = self.i;
        let mut i = start;
        while i < b.len()
            && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80)
        {
            i += 1;
        }
        self.i = i;
        let word = &b[start..i];
        if PREFIX_WORDS.contains(&word) {
            self.chain(start)?;
        }
        self.slash = if EXPRESSION_WORDS.contains(&word) || PREFIX_WORDS.contains(&word) {
            Slash::Regex
        } else {
            Slash::Divide
        };
        Ok(())
    }

    /// One level deeper at `at`; past [`MAX_NESTING`], the script's error.
    fn deeper(&mut self, at: usize) -> Result<(), Located> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(Located::new(
                at,
                format!(
                    "the script nests deeper than {MAX_NESTING} levels here (brackets, arrows, \
                     operators); flatten it, e.g. build deep data in a loop"
                ),
            ));
        }
        self.deepest = self.deepest.max(self.depth);
        Ok(())
    }

    /// A chain token at `at`: one level until the innermost level's next
    /// `,` or `;`.
    fn chain(&mut self, at: usize) -> Result<(), Located> {
        if let Some(top) = self.stack.last_mut() {
            top.chain += 1;
        }
        self.deeper(at)
    }

    /// Drops the chain tokens of the innermost level (a `,` or `;`).
    fn end_chain(&mut self) {
        if let Some(top) = self.stack.last_mut() {
            self.depth -= top.chain;
            top.chain = 0;
        }
    }

    /// Opens a level at `at` for `bracket`.
    fn open(&mut self, bracket: u8, at: usize) -> Result<(), Located> {
        self.deeper(at)?;
        self.stack.push(Level { bracket, chain: 0 });
        Ok(())
    }

    /// Closes the innermost level.
    fn close(&mut self) {
        if let Some(level) = self.stack.pop() {
            self.depth -= 1 + level.chain;
        }
    }

    /// Template text from `from` (inside an open template level): to its
    /// closing backtick, which closes the template, or to a `${`, which
    /// opens an expression level that the matching `}` ends.
    fn template_text(&mut self, from: usize) -> Result<(), Located> {
        self.i = skip_template_text(self.b, from);
        if self.b.get(self.i) == Some(&b'`') {
            self.close();
            self.i += 1;
            self.slash = Slash::Divide;
        } else {
            self.i += 2;
            self.open(b'$', self.i)?;
            self.slash = Slash::Regex;
        }
        Ok(())
    }
}

/// Whether the token at `i` can only start a new statement after a value
/// and a line break (a word other than an infix one, a number, a string).
fn starts_statement(b: &[u8], i: usize) -> bool {
    let c = b[i];
    if c.is_ascii_digit() || c == b'\'' || c == b'"' || c == b'`' {
        return true;
    }
    if !(c.is_ascii_alphabetic() || c == b'_' || c == b'$' || c >= 0x80) {
        return false;
    }
    let end = b[i..]
        .iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80))
        .map_or(b.len(), |n| i + n);
    !INFIX_WORDS.contains(&&b[i..end])
}

/// Words that continue an expression across a line break.
const INFIX_WORDS: &[&[u8]] = &[b"in", b"of", b"instanceof", b"as", b"satisfies"];

/// Words after which an expression (so a regular expression) may start.
const EXPRESSION_WORDS: &[&[u8]] = &[
    b"return",
    b"case",
    b"do",
    b"else",
    b"in",
    b"of",
    b"instanceof",
    b"throw",
    b"extends",
];

/// Prefix words: each recurses into the expression after it.
const PREFIX_WORDS: &[&[u8]] = &[
    b"typeof",
    b"void",
    b"delete",
    b"await",
    b"new",
    b"yield",
    b"keyof",
    b"readonly",
];

fn skip_line(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

fn skip_block_comment(b: &[u8], mut i: usize) -> usize {
    i += 2;
    while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
        i += 1;
    }
    (i + 2).min(b.len())
}

/// A string literal from its quote to after the closing one (or the end of
/// the line: an unterminated string is the parser's to report).
fn skip_string(b: &[u8], mut i: usize) -> usize {
    let quote = b[i];
    i += 1;
    while i < b.len() && b[i] != quote && b[i] != b'\n' {
        if b[i] == b'\\' {
            i += 1;
        }
        i += 1;
    }
    (i + 1).min(b.len())
}

/// A regular expression from its `/` to after its flags.
fn skip_regex(b: &[u8], mut i: usize) -> usize {
    i += 1;
    let mut class = false;
    while i < b.len() && b[i] != b'\n' {
        match b[i] {
            b'\\' => i += 1,
            b'[' => class = true,
            b']' => class = false,
            b'/' if !class => break,
            _ => {}
        }
        i += 1;
    }
    i += 1;
    while i < b.len() && b[i].is_ascii_alphabetic() {
        i += 1;
    }
    i.min(b.len())
}

/// Template text from `i` to its closing backtick or to a `${` (returns
/// the index of either).
fn skip_template_text(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'`' => return i,
            b'$' if b.get(i + 1) == Some(&b'{') => return i,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn depth(s: &str) -> usize {
        check(s).unwrap_or_else(|e| panic!("refused: {}", e.message))
    }

    #[rstest]
    #[case::flat("const a = 1; const b = 2; return a + b;", 1)]
    #[case::call("f(g(h(1)));", 3)]
    #[case::strings_do_not_count("const s = '((((((' + \"[[[[\";", 1)]
    #[case::comments_do_not_count("// ((((\n/* [[[[ */ f(1);", 1)]
    #[case::regex_does_not_count("const r = /[(]{3}\\)/g; f(/)/);", 1)]
    #[case::division_is_not_a_regex("const x = a / b / (c);", 2)]
    #[case::template("const t = `a ${f(`b ${g(1)}`)} c`;", 7)]
    #[case::sequential_arrows_reset("a.map(x => x).filter(y => y);", 2)]
    fn depths(#[case] source: &str, #[case] want: usize) {
        assert_eq!(depth(source), want, "{source}");
    }

    #[rstest]
    #[case::brackets(format!("return {}{};", "[".repeat(5000), "]".repeat(5000)))]
    #[case::parens(format!("return {}1{};", "(".repeat(200_000), ")".repeat(200_000)))]
    #[case::arrows(format!("const f = {}1;", "x => ".repeat(5000)))]
    #[case::unary(format!("return {}x;", "!".repeat(5000)))]
    #[case::await_chain(format!("return {}x;", "await ".repeat(5000)))]
    #[case::ternaries(format!("return {}0;", "a ? b : ".repeat(5000)))]
    #[case::assignments(format!("{}0;", "a = ".repeat(5000)))]
    #[case::generics(format!("type T = {}X{};", "A<".repeat(5000), ">".repeat(5000)))]
    #[case::type_literals(format!("type T = {}x: 1{};", "{ a: ".repeat(5000), " }".repeat(5000)))]
    #[case::templates(format!("const t = {}{};", "`${".repeat(5000), "}`".repeat(5000)))]
    #[case::regex_closers_hide_nothing(format!("return {}1{};", "(/)/(".repeat(3000), ")".repeat(6000)))]
    fn deep_nesting_is_refused(#[case] source: String) {
        let e = check(&source).expect_err("too deep");
        assert!(
            e.message.contains("deeper than 1000 levels"),
            "{}",
            e.message
        );
    }

    /// Long flat scripts: many statements and operators, none nested.
    #[rstest]
    #[case::semicolon_less_statements("let x = 1\n".repeat(5000))]
    #[case::statements(format!("{}return 1;", "x = a ? b : c;\n".repeat(5000)))]
    #[case::comparisons("if (a < b) f();\nx = a < b;\n".repeat(3000))]
    #[case::postfix("i++; j--; k!.x;\n".repeat(3000))]
    #[case::sums(format!("return {}1;", "a + b - c * d / e + ".repeat(3000)))]
    #[case::calls_in_a_row("f(1); g([2]); h({ a: 3 });\n".repeat(3000))]
    #[case::optional_and_nullish("x = a?.b ?? c?.d ?? e;\n".repeat(3000))]
    fn flat_scripts_are_accepted(#[case] source: String) {
        assert!(depth(&source) < 10, "{}", depth(&source));
    }

    /// Operators at the start of a line continue the expression: a ternary
    /// chain written that way is still counted.
    #[test]
    fn leading_operators_do_not_reset_the_chain() {
        let source = format!("return a{}\n0;", "\n? b\n: a".repeat(3000));
        assert!(check(&source).is_err());
    }

    #[test]
    fn the_limit_itself_is_accepted() {
        let n = MAX_NESTING - 1;
        let source = format!("f{}1{};", "(".repeat(n), ")".repeat(n));
        assert_eq!(depth(&source), n);
    }
}
