import Crypto
import Foundation
import HTTPTypes

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A cache store in a directory, bounded by bytes with least-recently-used eviction; it
/// survives restarts.
///
/// Each entry is one file named by the SHA-256 of its key, readable only by its owner (0600, in a
/// directory created 0700; a directory that exists keeps its permissions). A file named as an
/// entry is (64 hexadecimal digits) is taken for one, and removed when it is not a valid entry;
/// other files are left alone. Give the store a directory of its own. A file is written under a temporary name and renamed into place, so a crash
/// leaves either the old entry or the new one; the file carries a digest of its body, so a
/// corrupt or truncated entry is detected on reading, treated as a miss and removed. Recency is
/// kept in each file's modification time, so eviction order survives restarts too.
///
/// Only plain files of the current user's are entries: a link, a FIFO or a device planted under
/// an entry's name, or a file another user wrote (in a directory others may write to), is
/// neither read nor followed nor counted, and only the current user's own leftovers are removed.
///
/// Reads and writes are small synchronous file operations on the calling thread. The first use
/// reads the header of every entry file to build the index (recency, URL and partition per entry).
///
/// Stores made in one process for the same directory share that index, so each sees the others'
/// entries and the directory's size is counted once. The first of them to be used reads the
/// directory and trims it to its own `capacity`; after that each keeps to its own `capacity` when
/// it writes. The directory is created when the store is made and compared with symbolic links
/// resolved. Stores in different processes do not share an index: give each process a directory
/// of its own.
public final class DiskCacheStore: CacheStore {
    private static let magic = Data("CRS1".utf8)

    private struct Record: Codable {
        var key: String
        var url: String
        var method: String
        var partition: String
        var status: Int
        var headers: [[String]]
        var requestDate: Double
        var responseDate: Double
        var varying: [Varying]
        var bodyLength: Int
        var bodyDigest: String
        /// Absent from files written before it was kept (no limit then).
        var freshnessLimit: Double?
    }

    private struct Varying: Codable {
        var name: String
        var value: String?
    }

    private struct Info {
        var url: String
        var partition: String
    }

    private struct State {
        var loaded = false
        var recency = LRUIndex<String>()
        var info: [String: Info] = [:]
    }

    /// The directory holding the entries.
    public let directory: URL
    /// The most bytes the entry files may take together.
    public let capacity: Int
    private let state: Locked<State>

    /// One directory's index, held weakly so it goes with the last store using it.
    private final class Registration: @unchecked Sendable {
        // Read and written only under `registry`'s lock.
        weak var state: Locked<State>?
        init(_ state: Locked<State>) { self.state = state }
    }

    /// The index of each directory a store in this process uses, by resolved path.
    private static let registry = Locked<[String: Registration]>([:])

    /// Creates a store in `directory` (created, owner-only, if missing) holding at most `capacity` bytes.
    public init(directory: URL, capacity: Int = 100 * 1024 * 1024) {
        self.directory = directory
        self.capacity = capacity
        // Made first: links are resolved only in a path that exists, and a store made before the
        // directory and one made after must find the same index.
        Self.createDirectory(directory)
        let path = directory.standardizedFileURL.resolvingSymlinksInPath().path
        self.state = Self.registry.withLock { registry in
            if let state = registry[path]?.state { return state }
            registry = registry.filter { $0.value.state != nil }
            let state = Locked(State())
            registry[path] = Registration(state)
            return state
        }
    }

    /// The bytes the entry files take now.
    public var size: Int { self.withState { $0.recency.totalCost } }

    /// The number of entries stored now.
    public var count: Int { self.withState { $0.recency.count } }

    /// The entry stored under `key`, or `nil`; reading it makes it the most recently used.
    public func entry(forKey key: String) -> CacheEntry? {
        let name = Self.fileName(for: key)
        guard self.withState({ $0.info[name] != nil }) else { return nil }
        let url = self.directory.appendingPathComponent(name)
        // Its modification time (the recency a restart finds) is set through the descriptor it
        // was read from: a link put under its name since is not followed.
        guard let data = Self.readOwnFile(atPath: url.path, touching: true), let entry = Self.decode(data, key: key) else {
            self.removeEntry(forKey: key)
            return nil
        }
        self.withState { $0.recency.touch(name) }
        return entry
    }

    /// Stores `entry` under `key`, then evicts the least recently used entries past the capacity.
    public func setEntry(_ entry: CacheEntry, forKey key: String) {
        let name = Self.fileName(for: key)
        guard let data = Self.encode(entry, key: key), data.count <= self.capacity else {
            self.removeEntry(forKey: key)
            return
        }
        self.withState { state in
            // A write that fails (a full disk) leaves no older entry to be served in its place.
            guard (try? OwnerOnlyFile.write(data, to: self.directory.appendingPathComponent(name))) != nil else {
                self.remove(name, from: &state)
                return
            }
            state.recency.insert(name, cost: data.count)
            state.info[name] = Info(url: entry.url, partition: entry.partition)
            while state.recency.totalCost > self.capacity, let oldest = state.recency.removeOldest() {
                state.info[oldest] = nil
                unlink(self.directory.appendingPathComponent(oldest).path)
            }
        }
    }

    /// Removes the entry under `key`, if any.
    public func removeEntry(forKey key: String) {
        let name = Self.fileName(for: key)
        self.withState { state in
            self.remove(name, from: &state)
        }
    }

    /// Removes the entries in `scope`.
    public func removeEntries(in scope: CacheScope) {
        self.withState { state in
            for (name, info) in state.info where scope.contains(url: info.url, partition: info.partition) {
                self.remove(name, from: &state)
            }
        }
    }

    private func remove(_ name: String, from state: inout State) {
        state.recency.remove(name)
        state.info[name] = nil
        unlink(self.directory.appendingPathComponent(name).path)
    }

    private func withState<Result>(_ body: (inout State) -> Result) -> Result {
        self.state.withLock { state in
            // A directory that could not be listed is listed again on the next use: else the
            // files in it would stay out of the index (and of the capacity, and of clearing)
            // for the life of the process.
            if !state.loaded { state.loaded = self.load(into: &state) }
            return body(&state)
        }
    }

    /// Builds the index from the directory: entries oldest-used first, leftovers and unreadable
    /// files removed. Returns whether the directory could be listed.
    private func load(into state: inout State) -> Bool {
        let manager = FileManager.default
        Self.createDirectory(self.directory)
        guard let names = try? manager.contentsOfDirectory(atPath: self.directory.path) else { return false }
        var found: [(name: String, used: Date, size: Int, info: Info)] = []
        for name in names {
            let path = self.directory.appendingPathComponent(name).path
            // Not followed (lstat): a link is judged as a link, and never an entry.
            var status = stat()
            guard lstat(path, &status) == 0, Self.isOwnPlainFile(status) else { continue }
            // Only a leftover of this store's own writing (the prefix and a UUID) is removed: a
            // user's `.tmp-notes` in a directory the cache was pointed at is not its to delete.
            if name.hasPrefix(OwnerOnlyFile.temporaryPrefix) {
                if UUID(uuidString: String(name.dropFirst(OwnerOnlyFile.temporaryPrefix.count))) != nil { unlink(path) }
                continue
            }
            guard name.count == 64, name.allSatisfy(\.isHexDigit) else { continue }
            // A variant written before only digests of the varying values were kept holds them
            // in clear (a credential, for `Vary: Authorization`); it is never looked up again
            // (its key is not made any more), so it goes now rather than at its eviction.
            guard let record = Self.readRecord(atPath: path), !record.varying.contains(where: { $0.value.map(Self.isClear) ?? false })
            else {
                unlink(path)
                continue
            }
            let used = Date(timeIntervalSince1970: Self.modificationTime(status))
            found.append((name, used, Int(status.st_size), Info(url: record.url, partition: record.partition)))
        }
        for item in found.sorted(by: { $0.used < $1.used }) {
            state.recency.insert(item.name, cost: item.size)
            state.info[item.name] = item.info
        }
        while state.recency.totalCost > self.capacity, let oldest = state.recency.removeOldest() {
            state.info[oldest] = nil
            unlink(self.directory.appendingPathComponent(oldest).path)
        }
        return true
    }

    /// Creates `directory` (owner-only) if it is missing; a failure shows when entries are written.
    private static func createDirectory(_ directory: URL) {
        try? FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    static func fileName(for key: String) -> String {
        SHA256.hex(Data(key.utf8))
    }

    /// Whether a stored varying value is the value itself, not its digest (`sha256:` and 64
    /// hexadecimal digits, as the cache makes it).
    private static func isClear(_ value: String) -> Bool {
        let prefix = "sha256:"
        guard value.hasPrefix(prefix) else { return true }
        let digits = value.dropFirst(prefix.count)
        return digits.count != 64 || !digits.allSatisfy(\.isHexDigit)
    }

    /// Whether a file's status is that of a plain file the current user owns.
    private static func isOwnPlainFile(_ status: stat) -> Bool {
        (status.st_mode & S_IFMT) == S_IFREG && status.st_uid == geteuid()
    }

    /// The file's modification time, in seconds since 1970.
    private static func modificationTime(_ status: stat) -> TimeInterval {
        #if canImport(Darwin)
        TimeInterval(status.st_mtimespec.tv_sec) + TimeInterval(status.st_mtimespec.tv_nsec) / 1e9
        #else
        TimeInterval(status.st_mtim.tv_sec) + TimeInterval(status.st_mtim.tv_nsec) / 1e9
        #endif
    }

    /// The file at `path` opened for reading when it is a plain file of the current user's:
    /// without following a link, and without waiting on a FIFO.
    private static func openOwnFile(atPath path: String) -> FileHandle? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        var status = stat()
        guard fstat(descriptor, &status) == 0, Self.isOwnPlainFile(status) else { return nil }
        return handle
    }

    /// The whole of a plain file of the current user's (see ``openOwnFile(atPath:)``); when
    /// `touching`, its modification time is set to now once it was read.
    private static func readOwnFile(atPath path: String, touching: Bool = false) -> Data? {
        guard let handle = Self.openOwnFile(atPath: path), let data = try? handle.readToEnd() ?? Data() else { return nil }
        if touching { futimens(handle.fileDescriptor, nil) }
        return data
    }

    /// Reads only the record at the start of a file, not the body.
    private static func readRecord(atPath path: String) -> Record? {
        guard let handle = Self.openOwnFile(atPath: path) else { return nil }
        defer { try? handle.close() }
        guard let prefix = try? handle.read(upToCount: 8), prefix.count == 8, prefix.prefix(4) == Self.magic else { return nil }
        let length = prefix.dropFirst(4).reduce(0) { $0 << 8 | Int($1) }
        guard length > 0, length < 1 << 24, let json = try? handle.read(upToCount: length), json.count == length else { return nil }
        return try? JSONDecoder().decode(Record.self, from: json)
    }

    package static func encode(_ entry: CacheEntry, key: String) -> Data? {
        let record = Record(
            key: key, url: entry.url, method: entry.method, partition: entry.partition, status: entry.status,
            headers: entry.headers.map { [$0.name.rawName, $0.value] },
            requestDate: entry.requestDate.timeIntervalSince1970, responseDate: entry.responseDate.timeIntervalSince1970,
            varying: entry.varyingFields.sorted { $0.key < $1.key }.map { Varying(name: $0.key, value: $0.value) },
            bodyLength: entry.body.count, bodyDigest: SHA256.hex(entry.body), freshnessLimit: Self.storable(entry.freshnessLimit)
        )
        guard let json = try? JSONEncoder().encode(record) else { return nil }
        var data = Self.magic
        let length = UInt32(json.count)
        data.append(contentsOf: [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)])
        data.append(json)
        data.append(entry.body)
        return data
    }

    /// A limit as JSON can hold it, meaning what it meant: none for `+infinity`, the limit that
    /// forbids reuse for what is not a number or below 0.
    private static func storable(_ limit: TimeInterval?) -> TimeInterval? {
        guard let limit, limit != .infinity else { return nil }
        return CacheRules.forbidsReuse(limit) ? CacheRules.reuseForbidden : limit
    }

    /// The entry in a file's bytes, or `nil` when they are not a complete, intact entry for `key`.
    package static func decode(_ data: Data, key: String) -> CacheEntry? {
        guard data.count >= 8, data.prefix(4) == Self.magic else { return nil }
        let start = data.startIndex
        let length = data[(start + 4)..<(start + 8)].reduce(0) { $0 << 8 | Int($1) }
        guard data.count >= 8 + length,
            let record = try? JSONDecoder().decode(Record.self, from: data[(start + 8)..<(start + 8 + length)]),
            record.key == key,
            // The record is not covered by the body's digest: a status that no response can
            // have (HTTPResponse.Status traps outside 0...999) makes the file a miss, except
            // the marker of a variant index (which is never made a response).
            (100...999).contains(record.status) || record.status == CacheEntry.variantIndexStatus,
            record.requestDate.isFinite, record.responseDate.isFinite
        else { return nil }
        let body = Data(data[(start + 8 + length)...])
        guard body.count == record.bodyLength, SHA256.hex(body) == record.bodyDigest else { return nil }
        var headers = HTTPFields()
        for pair in record.headers {
            guard pair.count == 2, let name = HTTPField.Name(pair[0]) else { return nil }
            headers.append(HTTPField(name: name, value: pair[1]))
        }
        var varying: [String: String?] = [:]
        for field in record.varying { varying[field.name] = field.value }
        var entry = CacheEntry(
            url: record.url, method: record.method, partition: record.partition, status: record.status, headers: headers,
            body: body, requestDate: Date(timeIntervalSince1970: record.requestDate),
            responseDate: Date(timeIntervalSince1970: record.responseDate), varyingFields: varying
        )
        entry.freshnessLimit = record.freshnessLimit
        return entry
    }
}
