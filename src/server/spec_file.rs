//! The spec's file as the reloader watches it: which watcher events concern it, and whether a
//! stat of its path changed since it was last asked.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

/// The spec's file as the watcher and the periodic stat see it: its name in the watched
/// directory, and what a stat of its path last said.
#[derive(Debug)]
pub(crate) struct SpecFile {
    path: PathBuf,
    name: Option<OsString>,
    seen: Mutex<Option<Stat>>,
}

/// What changes when a file is written or replaced: size, modification time, and which file.
type Stat = (u64, Option<SystemTime>, u64);

impl SpecFile {
    /// The file at `path`, as it is now.
    pub(crate) fn new(path: &Path) -> SpecFile {
        SpecFile { path: path.to_path_buf(), name: path.file_name().map(OsString::from), seen: Mutex::new(stat(path)) }
    }

    /// Whether the file at the path differs from when this was last asked (or created). The path
    /// is followed through symlinks, so a ConfigMap swapping the link beside it changes it.
    pub(crate) fn changed(&self) -> bool {
        let now = stat(&self.path);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == now {
            return false;
        }
        *seen = now;
        true
    }

    /// Whether a watcher event in the spec's directory may have changed the spec: it names the
    /// spec (written, created, removed, renamed onto it), or the spec's path now leads elsewhere.
    /// Anything else in the directory (a log written beside the spec) sets off nothing, so a
    /// refused spec and its own log lines cannot feed each other.
    pub(crate) fn concerned(&self, event: &notify::Event) -> bool {
        // Reading the file is an access: counting it would reload on our own reads.
        if event.kind.is_access() {
            return false;
        }
        let names_spec = event.paths.iter().any(|p| p.file_name().is_some_and(|n| Some(n) == self.name.as_deref()));
        // Asked first, so what the watcher saw is not seen again by the periodic stat.
        self.changed() || names_spec
    }
}

fn stat(path: &Path) -> Option<Stat> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let inode = 0;
    Some((m.len(), m.modified().ok(), inode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::Event;
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, EventKind, ModifyKind, RenameMode};

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("opbound-reload-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn event(kind: EventKind, paths: &[&Path]) -> Event {
        paths.iter().fold(Event::new(kind), |e, p| e.add_path(p.to_path_buf()))
    }

    #[test]
    fn only_events_that_touch_the_spec_count() {
        let d = dir("events");
        let spec = d.join("api.yaml");
        std::fs::write(&spec, "a").unwrap();
        let file = SpecFile::new(&spec);
        let log = d.join("opbound.log");
        std::fs::write(&log, "a line").unwrap();
        let write = EventKind::Modify(ModifyKind::Data(DataChange::Any));
        assert!(!file.concerned(&event(write, &[&log])), "a log written beside the spec");
        assert!(!file.concerned(&event(EventKind::Create(CreateKind::File), &[&d.join(".api.yaml.swp")])));
        assert!(!file.concerned(&event(EventKind::Access(AccessKind::Open(AccessMode::Any)), &[&spec])), "our read");
        assert!(!file.concerned(&event(EventKind::Access(AccessKind::Close(AccessMode::Read)), &[&spec])));

        assert!(file.concerned(&event(write, &[&spec])), "written in place");
        let tmp = d.join(".api.yaml.tmp");
        assert!(file.concerned(&event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&spec])));
        assert!(
            file.concerned(&event(EventKind::Modify(ModifyKind::Name(RenameMode::Both)), &[&tmp, &spec])),
            "renamed onto it"
        );
        // A relative spec path: the watcher reports `./api.yaml`.
        let relative =
            SpecFile { path: PathBuf::from("api.yaml"), name: Some("api.yaml".into()), seen: Mutex::new(None) };
        assert!(relative.concerned(&event(write, &[Path::new("./api.yaml")])));
        let _ = std::fs::remove_dir_all(d);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_swapped_beside_the_spec_counts_once() {
        // A ConfigMap: api.yaml -> ..data/api.yaml, and an update renames a new ..data link over
        // the old one. No event names api.yaml; its path now leads to another file.
        let d = dir("configmap");
        for (version, text) in [("v1", "openapi: 3.0.3 # one"), ("v2", "openapi: 3.0.3 # two, longer")] {
            std::fs::create_dir_all(d.join(version)).unwrap();
            std::fs::write(d.join(version).join("api.yaml"), text).unwrap();
        }
        std::os::unix::fs::symlink("v1", d.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/api.yaml", d.join("api.yaml")).unwrap();
        let file = SpecFile::new(&d.join("api.yaml"));
        std::os::unix::fs::symlink("v2", d.join("..data_tmp")).unwrap();
        std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        let swapped = event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&d.join("..data")]);
        assert!(file.concerned(&swapped), "the spec's path leads to a new file");
        assert!(!file.concerned(&swapped), "seen once");
        assert!(!file.changed(), "and not again by the periodic stat");
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn what_the_watcher_saw_the_periodic_stat_does_not_see_again() {
        let d = dir("stat");
        let spec = d.join("api.yaml");
        std::fs::write(&spec, "one").unwrap();
        let file = SpecFile::new(&spec);
        assert!(!file.changed(), "nothing changed yet");
        std::fs::write(d.join("next"), "two, longer").unwrap();
        std::fs::rename(d.join("next"), &spec).unwrap();
        assert!(file.concerned(&event(EventKind::Modify(ModifyKind::Name(RenameMode::To)), &[&spec])));
        assert!(!file.changed(), "the stat two seconds later finds what the watcher saw");
        let _ = std::fs::remove_dir_all(d);
    }
}
