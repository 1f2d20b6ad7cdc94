/// The version of Courier this code is: the newest release named in `CHANGELOG.md`.
///
/// Pre-1.0 semantic versioning: until 1.0 a minor version (0.x.0) may change the public API;
/// a patch version never does. `courier --version` prints the same text.
public let courierVersion = "0.1.0"
