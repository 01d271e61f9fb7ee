//! What `gym library log`, `show` and `diff` print.

use std::fmt::Write as _;

use gym::library::{Library, Op, State};

/// `gym library log`: one line per version, newest first.
pub(super) fn render_log(library: &Library) -> String {
    let mut text = format!(
        "{:>7}  {:<24}  {:<12}  {:>6}  {:<12}  {}\n",
        "version", "created", "ops", "active", "root", "provenance"
    );
    for version in library.versions().iter().rev() {
        let count = |kind: &str| version.ops.iter().filter(|op| op.kind() == kind).count();
        let ops = format!(
            "+{} ~{} -{}",
            count("add"),
            count("update"),
            count("delete")
        );
        let created = version
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        writeln!(
            text,
            "{:>7}  {created:<24}  {ops:<12}  {:>6}  {:<12}  {}",
            version.version,
            version.count,
            version.root.short(12),
            version.provenance.summary()
        )
        .expect("writing to a String");
    }
    text
}

/// `gym library show`: the experiences of one version.
pub(super) fn render_show(
    library: &Library,
    version: u64,
    state: &State,
    all: bool,
) -> anyhow::Result<String> {
    let record = library.version(version)?;
    let mut text = format!(
        "Library `{}` version {version} (latest {}): {} active experiences, root {}\n",
        library.name(),
        library.head_version(),
        state.active_count(),
        record.root
    );
    let experiences: Vec<_> = if all {
        state.all().collect()
    } else {
        state.active().collect()
    };
    for experience in experiences {
        let deleted = if experience.is_active() {
            ""
        } else {
            " (deleted)"
        };
        writeln!(
            text,
            "{} [{}] ({:.2}){deleted} {}",
            experience.id, experience.domain, experience.confidence, experience.text
        )?;
        let usage = experience.usage;
        // Shown once there is served feedback, so libraries without any read as before.
        let served = if usage.served_good + usage.served_bad > 0 {
            format!(
                " · served good {} · served bad {}",
                usage.served_good, usage.served_bad
            )
        } else {
            String::new()
        };
        writeln!(
            text,
            "       v{}..v{} {} · injected {} · helpful {} · harmful {}{served}",
            experience.created_in,
            experience.updated_in,
            experience.provenance.summary(),
            usage.injected,
            usage.helpful,
            usage.harmful
        )?;
        // Shown once measured (`gym library credit`), so libraries without any read as before.
        if let Some(credit) = &usage.credit {
            let stale = if experience.is_active() && credit.version < experience.updated_in {
                format!(
                    " · measured before its update in v{}",
                    experience.updated_in
                )
            } else {
                String::new()
            };
            writeln!(
                text,
                "       {} · measured {}{stale}",
                credit.summary(),
                credit
                    .measured_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            )?;
        }
    }
    Ok(text)
}

/// `gym library diff`: the composed ops, with old texts for updates and deletes.
pub(super) fn render_diff(name: &str, a: u64, b: u64, from: &State, ops: &[Op]) -> String {
    let count = |kind: &str| ops.iter().filter(|op| op.kind() == kind).count();
    let mut text = format!(
        "diff `{name}` {a}..{b}: {} added, {} updated, {} deleted\n",
        count("add"),
        count("update"),
        count("delete")
    );
    for op in ops {
        let line = match op {
            Op::Add {
                id,
                text,
                domain,
                confidence,
                ..
            } => format!("+ {id} [{domain}] ({confidence:.2}) {text}"),
            Op::Update {
                id,
                text,
                domain,
                confidence,
                ..
            } => {
                let old = from
                    .get_active(*id)
                    .expect("an update's experience is active in `from`");
                format!(
                    "~ {id} [{}] ({:.2}) {}\n  {} [{domain}] ({confidence:.2}) {text}",
                    old.domain,
                    old.confidence,
                    old.text,
                    " ".repeat(id.to_string().len())
                )
            }
            Op::Delete { id, .. } => {
                let old = from
                    .get_active(*id)
                    .expect("a delete's experience is active in `from`");
                format!(
                    "- {id} [{}] ({:.2}) {}",
                    old.domain, old.confidence, old.text
                )
            }
        };
        writeln!(text, "{line}").expect("writing to a String");
    }
    text
}
