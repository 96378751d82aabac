"""The safe-filesystem layer, under everything tau writes (in the spirit of git's tempfile.c under lockfile.c).

  tree     Tree: a folder reached through one descriptor; opening, making folders, scanning, removing
  openat   the steps under it: one folder or file opened relative to its parent, and the one place that refuses a
           symlink
  atomic   the write protocols on one folder descriptor: new file, immutable link-no-overwrite, mutable
           rename-over, crash debris
  publish  publishing a staged folder at its final name without replacing anything (renameat2, or its fallback)
  writeback  a large file being written handed to writeback block by block and dropped from the page cache once
           on disk, so it evicts nothing else (the collection's outputs, the fetch's ranges)
"""
