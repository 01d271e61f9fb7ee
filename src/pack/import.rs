//! Importing a verified pack as a library, with its whole history.

use std::path::Path;

use super::error::PackError;
use super::verify::{Verified, write_library};
use crate::library::{Library, LibraryError, TEMP_PREFIX, library_dir};

/// Adds the verified pack's library under `root` as `name`, with every version it holds.
/// The files are staged in a temporary directory and renamed into place, so an interrupted
/// import leaves no half-made library; a library that exists is never replaced.
pub fn import(verified: &Verified, root: &Path, name: &str) -> Result<Library, PackError> {
    let dir = library_dir(root, name)?;
    let exists = || {
        PackError::Store(LibraryError::AlreadyExists {
            name: name.to_owned(),
            path: dir.clone(),
        })
    };
    if dir.exists() {
        return Err(exists());
    }
    std::fs::create_dir_all(root).map_err(PackError::io("create", root))?;
    let staging = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempdir_in(root)
        .map_err(PackError::io("create a temporary directory in", root))?;
    write_library(staging.path(), &verified.library_files, true)?;
    crate::durable::sync_dir(staging.path())?;
    let staged = staging.keep();
    // rename(2) would replace an empty directory that appeared meanwhile; refuse instead.
    if dir.exists() {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(exists());
    }
    if let Err(error) = std::fs::rename(&staged, &dir) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(PackError::io("create", &dir)(error));
    }
    crate::durable::sync_dir(root)?;
    Ok(Library::open(root, name)?)
}
