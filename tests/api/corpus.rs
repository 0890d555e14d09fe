//! The bounce corpus (issue 78, docs/bounces.md): real delivery status notifications, providers' own
//! bounce formats, feedback-loop reports and automatic replies from public sources
//! (`fixtures/mail-corpus/`, whose README.md names each source and its licence), each read by the
//! classifier that inbound mail goes through. The figures are printed; the thresholds are the issue's:
//! at least 95% of bounces read as bounces with the right hard/soft, at least 95% of feedback reports read
//! as complaints, and no automatic reply or ordinary message taken for a bounce or a complaint.

use std::path::{Path, PathBuf};

use herald_host::domain::inbound::{Kind, classify};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/api/fixtures/mail-corpus")
}

fn files(class: &str) -> Vec<PathBuf> {
    let dir = corpus_dir().join(class);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "eml"))
        .collect();
    out.sort();
    out
}

/// The message as it comes over SMTP, and its envelope sender: a mailbox file's leading `From ` line is
/// not part of the message; the Return-Path header, when there is one, is the envelope sender, else the
/// null sender reports come from.
fn message(path: &Path) -> (Vec<u8>, String) {
    let raw = std::fs::read(path).unwrap();
    let raw = if raw.starts_with(b"From ") {
        raw.iter().position(|b| *b == b'\n').map(|i| raw[i + 1..].to_vec()).unwrap_or_default()
    } else {
        raw
    };
    let head = String::from_utf8_lossy(&raw[..raw.len().min(64 * 1024)]).into_owned();
    let mut sender = String::new();
    for line in head.lines() {
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("return-path")
        {
            sender = value.trim().trim_start_matches('<').split('>').next().unwrap_or("").trim().to_string();
            break;
        }
    }
    (raw, sender)
}

struct Tally {
    name: &'static str,
    right: usize,
    total: usize,
    wrong: Vec<String>,
}

impl Tally {
    fn percent(&self) -> f64 {
        if self.total == 0 { 100.0 } else { self.right as f64 * 100.0 / self.total as f64 }
    }
}

fn what(kind: &Kind) -> String {
    match kind {
        Kind::Bounce(b) => format!("{} bounce {}", if b.permanent { "hard" } else { "soft" }, b.status),
        Kind::Complaint(c) => format!("complaint {}", c.feedback_type),
        Kind::Mail(m) => format!("mail (autoReply {})", m.auto_reply),
        Kind::Ignored(why) => format!("ignored: {why}"),
    }
}

fn tally(name: &'static str, class: &str, right: impl Fn(&Kind) -> bool) -> Tally {
    let mut t = Tally { name, right: 0, total: 0, wrong: Vec::new() };
    for path in files(class) {
        let (raw, sender) = message(&path);
        let kind = classify(&raw, &sender);
        t.total += 1;
        if right(&kind) {
            t.right += 1;
        } else {
            t.wrong.push(format!("{class}/{}: {}", path.file_name().unwrap().to_string_lossy(), what(&kind)));
        }
    }
    t
}

#[test]
fn corpus_of_real_reports_is_classified_within_the_issues_thresholds() {
    let not_a_report = |k: &Kind| !matches!(k, Kind::Bounce(_) | Kind::Complaint(_));
    let tallies = [
        tally("hard bounces", "hard", |k| matches!(k, Kind::Bounce(b) if b.permanent)),
        tally("soft bounces", "soft", |k| matches!(k, Kind::Bounce(b) if !b.permanent)),
        tally("complaints (ARF)", "complaint", |k| matches!(k, Kind::Complaint(_))),
        tally("auto-replies", "auto-reply", not_a_report),
        tally("ordinary mail", "other", not_a_report),
    ];
    for t in &tallies {
        println!("{:<18} {:>3} of {:>3} ({:.1}%)", t.name, t.right, t.total, t.percent());
        for w in &t.wrong {
            println!("    wrong: {w}");
        }
    }
    let [hard, soft, arf, auto, other] = &tallies;
    let bounces = hard.right + soft.right;
    let bounce_total = hard.total + soft.total;
    let bounce_percent = bounces as f64 * 100.0 / bounce_total as f64;
    println!("bounces            {bounces:>3} of {bounce_total:>3} ({bounce_percent:.1}%) with the right hard/soft");
    assert!(bounce_total >= 60 && arf.total >= 15 && auto.total >= 5, "the corpus is smaller than it should be");
    assert!(bounce_percent >= 95.0, "bounces: {bounce_percent:.1}% < 95%");
    assert!(arf.percent() >= 95.0, "complaints: {:.1}% < 95%", arf.percent());
    assert!(auto.wrong.is_empty(), "automatic replies taken for reports: {:?}", auto.wrong);
    assert!(other.wrong.is_empty(), "ordinary mail taken for reports: {:?}", other.wrong);
}
