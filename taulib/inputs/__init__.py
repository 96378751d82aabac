"""A run's input dataset (tau-run(5) "Input"): Parquet, JSON lines or CSV, indexed once by tau-init and cut into
each attempt's rows, every byte verified against the index as it is read.

Reads: the input's files (never written). Writes: nothing itself; tau-init publishes the index, an attempt's input
file and the kept columns go through the run's writer.
Promises: an attempt's client sees exactly its shard's rows of the input the run was made over, or nothing (its
attempt fails "input changed", not retried); memory stays bounded whatever the input's size.

  index    the input index: the files in order, their sizes, sha256 and rows, their pieces; bad datasets refused
  parquet  a Parquet file's index (row groups as pieces), and a shard's rows decoded from a verified sparse copy
  text     a JSON lines or CSV file's index (pieces at row ends), and a shard's rows copied as bytes
  rows     where the rows of a text input end, read a chunk at a time (CSV quoting kept)
  source   opening an input file, hashing beside the work, and the errors of a changed input
  cut      the attempt's side: the shard's rows into the attempt's folder before its client starts
  keep     the input columns an output keeps, joined into the client's files at the attempt's end
"""
