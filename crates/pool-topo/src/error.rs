//! Typed errors: which file or call failed, and the OS error behind it.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// A topology read that failed. Carries the path or call and the cause.
#[derive(Debug)]
pub struct TopoError {
    kind: TopoErrorKind,
}

#[derive(Debug)]
enum TopoErrorKind {
    Read {
        path: PathBuf,
        source: io::Error,
    },
    Parse {
        path: Option<PathBuf>,
        input: String,
        reason: String,
    },
    Syscall {
        call: &'static str,
        source: io::Error,
    },
    NoCpus,
}

impl TopoError {
    pub(crate) fn read(path: &Path, source: io::Error) -> Self {
        TopoError {
            kind: TopoErrorKind::Read {
                path: path.to_owned(),
                source,
            },
        }
    }

    pub(crate) fn parse(input: &str, reason: impl Into<String>) -> Self {
        TopoError {
            kind: TopoErrorKind::Parse {
                path: None,
                input: input.to_owned(),
                reason: reason.into(),
            },
        }
    }

    pub(crate) fn syscall(call: &'static str, source: io::Error) -> Self {
        TopoError {
            kind: TopoErrorKind::Syscall { call, source },
        }
    }

    pub(crate) fn no_cpus() -> Self {
        TopoError {
            kind: TopoErrorKind::NoCpus,
        }
    }

    /// Attaches the file the unparsable text came from.
    pub(crate) fn in_file(mut self, file: &Path) -> Self {
        if let TopoErrorKind::Parse { path, .. } = &mut self.kind {
            *path = Some(file.to_owned());
        }
        self
    }

    /// The file involved, if the error is about one.
    pub fn path(&self) -> Option<&Path> {
        match &self.kind {
            TopoErrorKind::Read { path, .. } => Some(path),
            TopoErrorKind::Parse { path, .. } => path.as_deref(),
            _ => None,
        }
    }

    /// The OS error behind a failed read or syscall.
    pub fn os_error(&self) -> Option<&io::Error> {
        match &self.kind {
            TopoErrorKind::Read { source, .. } | TopoErrorKind::Syscall { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }

    /// Whether this is "file not found" (often normal: an optional file).
    pub fn is_not_found(&self) -> bool {
        self.os_error()
            .is_some_and(|err| err.kind() == io::ErrorKind::NotFound)
    }
}

impl fmt::Display for TopoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            TopoErrorKind::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            TopoErrorKind::Parse {
                path: Some(path),
                input,
                reason,
            } => write!(f, "{}: {reason} in {input:?}", path.display()),
            TopoErrorKind::Parse {
                path: None,
                input,
                reason,
            } => write!(f, "{reason} in {input:?}"),
            TopoErrorKind::Syscall { call, source } => write!(f, "{call} failed: {source}"),
            TopoErrorKind::NoCpus => write!(f, "no CPUs to describe (empty CPU set)"),
        }
    }
}

impl std::error::Error for TopoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.os_error()
            .map(|err| err as &(dyn std::error::Error + 'static))
    }
}

impl From<TopoError> for io::Error {
    fn from(err: TopoError) -> io::Error {
        let kind = err
            .os_error()
            .map_or(io::ErrorKind::InvalidData, io::Error::kind);
        io::Error::new(kind, err)
    }
}

/// Reads a small sysfs/procfs file as text.
pub(crate) fn read_text(path: &Path) -> Result<String, TopoError> {
    std::fs::read_to_string(path).map_err(|err| TopoError::read(path, err))
}
