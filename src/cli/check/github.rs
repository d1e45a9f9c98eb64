//! `check --format github`: one GitHub Actions workflow command per finding, so a pull request
//! shows each problem on its line.

use super::checked::{Checked, Outcome};
use crate::finding::{Finding, Severity};

/// `::error file=PATH,line=N,col=C,title=opbound::MESSAGE` per finding, then the summary line
/// the text format prints, which the log shows as it is.
pub(super) fn render(checked: &[Checked]) {
    for Checked { path, outcome } in checked {
        let file = path.display().to_string();
        for f in outcome.findings() {
            outln!("{}", annotation(&file, f));
        }
        if let Outcome::Unreadable { error } = outcome {
            outln!("::error file={},title=opbound::{}", property(&file), data(error));
        } else if let Some(line) = outcome.summary(&file) {
            outln!("{line}");
        }
    }
}

fn annotation(file: &str, f: &Finding) -> String {
    let command = match f.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    };
    let mut properties = format!("file={}", property(file));
    if let Some(line) = f.line {
        properties.push_str(&format!(",line={line}"));
        if let Some(column) = f.column {
            properties.push_str(&format!(",col={column}"));
        }
    }
    properties.push_str(",title=opbound");
    // The annotation shows the message alone; the pointer and operation say where in words.
    let pointer = if f.pointer.is_empty() { "/" } else { &f.pointer };
    let place = match &f.operation {
        Some(op) => format!("{pointer} in {op}"),
        None => pointer.to_string(),
    };
    format!("::{command} {properties}::{}", data(&format!("{place}: {}", f.message)))
}

/// A command's message, escaped as the runner unescapes it.
fn data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A property's value: also `:` and `,`, which would end it.
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::{data, property};

    #[test]
    fn escapes_as_the_runner_reads() {
        assert_eq!(data("50% off\r\nnext"), "50%25 off%0D%0Anext");
        assert_eq!(property("a,b:c%d\ne"), "a%2Cb%3Ac%25d%0Ae");
    }
}
