//! The note a write that bypasses a vote prints when its library is governed: `gym library
//! add/update/delete/import` and `gym grpo` commit new versions of the working head, which a
//! server governed by the same ledger does not serve until a proposal adopting them is executed.
//! The ledger is the one `gym gov` and `gym serve` use: `GYM_GOV_DIR`, else `./governance`.

use std::path::PathBuf;

use gym::gov::Governance;

/// The governance directory the other commands default to.
fn gov_dir() -> PathBuf {
    std::env::var_os("GYM_GOV_DIR").map_or_else(|| PathBuf::from("governance"), PathBuf::from)
}

/// What to tell a user who just committed `version` of `library`: nothing when no ledger
/// governs it.
pub fn note(library: &str, version: u64) -> Option<String> {
    let dir = gov_dir();
    if !Governance::ledger_path(&dir).exists() {
        return None;
    }
    let governance = match Governance::open(&dir) {
        Ok(governance) => governance,
        Err(error) => {
            return Some(format!(
                "warning: cannot read the governance ledger in {}: {error}",
                dir.display()
            ));
        }
    };
    governance
        .proposals()
        .any(|tracked| tracked.proposal.library == library)
        .then(|| {
            format!(
                "note: library `{library}` is governed by the ledger in {}: servers keep serving its governed head v{} until a proposal adopting v{version} is executed (`gym gov propose {library}`, a vote, `gym gov execute`)",
                dir.display(),
                governance.governed(library).version
            )
        })
}
