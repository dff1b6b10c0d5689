//! Figures, targets and their rendering (text, markdown, JSON).

use serde_json::{Value, json};

use crate::stats::Stats;

/// What a figure measures, which decides "better" and the ratio's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A duration: lower is better.
    Time,
    /// A size: lower is better.
    Memory,
    /// A throughput: higher is better.
    Rate,
}

#[derive(Debug, Clone)]
pub struct Target {
    pub text: String,
    /// `None`: not measured in this invocation.
    pub met: Option<bool>,
    /// The figure the verdict rests on.
    pub detail: String,
}

#[derive(Debug, Clone)]
pub struct Figure {
    pub id: &'static str,
    pub title: String,
    pub unit: &'static str,
    pub kind: Kind,
    /// Label of the first column's side ("dsh", or "baseline").
    pub side: &'static str,
    pub dsh: Option<Stats>,
    pub peer: Option<Stats>,
    /// Label of the second column's side ("node", or "baseline": the
    /// same run without the feature measured).
    pub peer_side: &'static str,
    /// What the peer measures here, or why it has no figure.
    pub peer_note: Option<String>,
    pub notes: Vec<String>,
    pub targets: Vec<Target>,
    /// Why the figure was not measured at all.
    pub unavailable: Option<String>,
}

impl Figure {
    pub fn new(id: &'static str, title: impl Into<String>, unit: &'static str, kind: Kind) -> Self {
        Figure {
            id,
            title: title.into(),
            unit,
            kind,
            side: "dsh",
            dsh: None,
            peer: None,
            peer_side: "node",
            peer_note: None,
            notes: Vec::new(),
            targets: Vec::new(),
            unavailable: None,
        }
    }

    /// dsh median ÷ peer median.
    pub fn ratio(&self) -> Option<f64> {
        let (a, b) = (self.dsh.as_ref()?, self.peer.as_ref()?);
        (b.median > 0.0).then(|| a.median / b.median)
    }

    /// "12.3× faster", "2.0× less memory", "1.4× more calls/s" …
    pub fn ratio_words(&self) -> Option<String> {
        let r = self.ratio()?;
        if r <= 0.0 {
            return None;
        }
        let (good, bad, better) = match self.kind {
            Kind::Time => ("faster", "slower", r < 1.0),
            Kind::Memory => ("smaller", "larger", r < 1.0),
            Kind::Rate => ("higher", "lower", r > 1.0),
        };
        let factor = if r < 1.0 { 1.0 / r } else { r };
        Some(format!("{factor:.1}× {}", if better { good } else { bad }))
    }

    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "title": self.title,
            "unit": self.unit,
            "side": self.side,
            "dsh": self.dsh.as_ref().map(Stats::to_json),
            "node": self.peer.as_ref().map(Stats::to_json),
            "ratio": self.ratio(),
            "nodeNote": self.peer_note,
            "peerSide": self.peer_side,
            "notes": self.notes,
            "unavailable": self.unavailable,
            "targets": self.targets.iter().map(|t| json!({
                "target": t.text, "met": t.met, "detail": t.detail,
            })).collect::<Vec<_>>(),
        })
    }
}

/// A number with about four significant digits.
pub fn num(x: f64) -> String {
    let a = x.abs();
    if a >= 1000.0 {
        format!("{x:.0}")
    } else if a >= 100.0 {
        format!("{x:.1}")
    } else if a >= 10.0 {
        format!("{x:.2}")
    } else if a >= 0.01 || a == 0.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.5}")
    }
}

fn cell(s: &Option<Stats>) -> String {
    match s {
        Some(s) => format!(
            "{} [{} – {}] (n={})",
            num(s.median),
            num(s.p10),
            num(s.p90),
            s.n
        ),
        None => "—".into(),
    }
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "NOT MET",
        None => "not measured",
    }
}

pub struct Report {
    pub header: Vec<(String, String)>,
    pub figures: Vec<Figure>,
    pub header_json: Value,
}

impl Report {
    pub fn text(&self) -> String {
        let mut out = String::new();
        out.push_str("dsh workflow benchmark\n");
        for (k, v) in &self.header {
            out.push_str(&format!("  {k}: {v}\n"));
        }
        out.push_str("\nmedian [p10 – p90] (n); ratio = dsh median ÷ node median\n");
        for f in &self.figures {
            out.push_str(&format!("\n{} — {} ({})\n", f.id, f.title, f.unit));
            if let Some(why) = &f.unavailable {
                out.push_str(&format!("  {why}\n"));
                continue;
            }
            out.push_str(&format!("  {:<9} {}\n", f.side, cell(&f.dsh)));
            match (&f.peer, &f.peer_note) {
                (Some(_), note) => {
                    out.push_str(&format!("  {:<9} {}\n", f.peer_side, cell(&f.peer)));
                    if let Some(note) = note {
                        out.push_str(&format!("  {:<9} ({note})\n", ""));
                    }
                }
                (None, Some(note)) => {
                    out.push_str(&format!("  {:<9} {note}\n", f.peer_side));
                }
                (None, None) => {}
            }
            if let (Some(r), Some(w)) = (f.ratio(), f.ratio_words()) {
                out.push_str(&format!("  {:<9} {} ({w})\n", "ratio", num(r)));
            }
            for n in &f.notes {
                out.push_str(&format!("  {:<9} {n}\n", "note"));
            }
            for t in &f.targets {
                out.push_str(&format!(
                    "  {:<9} {}: {} — {}\n",
                    "target",
                    t.text,
                    verdict(t.met),
                    t.detail
                ));
            }
        }
        out.push_str("\ntargets\n");
        for t in self.figures.iter().flat_map(|f| &f.targets) {
            out.push_str(&format!(
                "  [{:<12}] {} — {}\n",
                verdict(t.met),
                t.text,
                t.detail
            ));
        }
        out
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.header {
            out.push_str(&format!("- **{k}**: {v}\n"));
        }
        out.push_str(
            "\n| figure | unit | dsh median [p10 – p90] (n) | node median [p10 – p90] (n) | dsh ÷ node |\n",
        );
        out.push_str("|---|---|---|---|---|\n");
        for f in &self.figures {
            let first = match (&f.unavailable, f.side) {
                (Some(why), _) => why.clone(),
                (None, "dsh") => cell(&f.dsh),
                (None, side) => format!("{side}: {}", cell(&f.dsh)),
            };
            let peer = match (&f.peer, &f.peer_note) {
                (Some(_), Some(note)) => format!("{} — {note}", cell(&f.peer)),
                (Some(_), None) => cell(&f.peer),
                (None, Some(note)) => note.clone(),
                (None, None) => "—".into(),
            };
            let peer = match f.peer_side {
                "node" => peer,
                side => format!("{side}: {peer}"),
            };
            let ratio = match (f.ratio(), f.ratio_words()) {
                (Some(r), Some(w)) => format!("{} ({w})", num(r)),
                _ => "—".into(),
            };
            out.push_str(&format!(
                "| `{}` {} | {} | {} | {} | {} |\n",
                f.id, f.title, f.unit, first, peer, ratio
            ));
        }
        let notes: Vec<_> = self
            .figures
            .iter()
            .flat_map(|f| f.notes.iter().map(move |n| (f.id, n)))
            .collect();
        if !notes.is_empty() {
            out.push_str("\nNotes:\n\n");
            for (id, n) in notes {
                out.push_str(&format!("- `{id}`: {n}\n"));
            }
        }
        out.push_str("\n| target | verdict | measured |\n|---|---|---|\n");
        for t in self.figures.iter().flat_map(|f| &f.targets) {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                t.text,
                verdict(t.met),
                t.detail
            ));
        }
        out
    }

    pub fn json(&self) -> Value {
        json!({
            "machine": self.header_json,
            "figures": self.figures.iter().map(Figure::to_json).collect::<Vec<_>>(),
        })
    }
}
