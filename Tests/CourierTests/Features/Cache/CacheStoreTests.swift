import Courier
import Foundation
import HTTPTypes
import Testing

/// A fresh directory under the system's temporary directory.
func temporaryDirectory(_ label: String) -> URL {
    FileManager.default.temporaryDirectory.appendingPathComponent("courier-\(label)-\(UUID().uuidString)")
}

func posixPermissions(_ url: URL) -> Int? {
    (try? FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? NSNumber)?.intValue
}

@Suite("Cache stores")
struct CacheStoreTests {
    /// The digest the cache keeps of the varying value "en".
    static let en = "sha256:dbd3a49d0d906b4ed9216b73330d2fb080ef2f758c12f3885068222e5e17151c"

    static func entry(_ url: String, partition: String = "", bodySize: Int = 100, language: String = Self.en) -> CacheEntry {
        CacheEntry(
            url: url, method: "GET", partition: partition, status: 200,
            headers: fields([("Cache-Control", "max-age=60"), ("ETag", "\"e\"")]),
            body: Data((0..<bodySize).map { UInt8($0 % 251) }), requestDate: Date(timeIntervalSince1970: 1000),
            responseDate: Date(timeIntervalSince1970: 1001),
            varyingFields: ["accept-language": language, "accept-encoding": String?.none]
        )
    }

    /// A variant written by a version that kept the varying values in clear (a credential, for
    /// `Vary: Authorization`) is never looked up again; a disk store deletes it when it opens
    /// rather than keep the value on disk until eviction. Digests stay.
    @Test
    func aVariantWithItsValuesInClearIsDeletedWhenTheDiskStoreOpens() throws {
        let directory = temporaryDirectory("disk-clear")
        defer { try? FileManager.default.removeItem(at: directory) }
        // Written as by the earlier version, whose store is gone by the next launch.
        do {
            let old = DiskCacheStore(directory: directory)
            old.setEntry(Self.entry("https://a/me", language: "Bearer s3cret"), forKey: "clear")
            old.setEntry(Self.entry("https://a/me", language: "sha256:not-a-digest"), forKey: "half")
            old.setEntry(Self.entry("https://a/me"), forKey: "digest")
        }
        #expect(self.entryFiles(directory).count == 3)
        let reopened = DiskCacheStore(directory: directory)
        #expect(reopened.entry(forKey: "clear") == nil)
        #expect(reopened.entry(forKey: "half") == nil)
        #expect(reopened.entry(forKey: "digest") == Self.entry("https://a/me"))
        #expect(self.entryFiles(directory).count == 1)
        var written = Data()
        for file in self.entryFiles(directory) { written += (try? Data(contentsOf: file)) ?? Data() }
        #expect(written.range(of: Data("s3cret".utf8)) == nil)
    }

    func entryFiles(_ directory: URL) -> [URL] {
        ((try? FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)) ?? [])
            .filter { !$0.lastPathComponent.hasPrefix(".") }
    }

    @Test
    func memoryStoreEvictsTheLeastRecentlyUsedByBytes() {
        let one = Self.entry("https://a/1", bodySize: 1000)
        let store = MemoryCacheStore(capacity: one.cost * 3)
        store.setEntry(one, forKey: "1")
        store.setEntry(Self.entry("https://a/2", bodySize: 1000), forKey: "2")
        store.setEntry(Self.entry("https://a/3", bodySize: 1000), forKey: "3")
        #expect(store.entry(forKey: "1") != nil)  // 1 is now the most recent
        store.setEntry(Self.entry("https://a/4", bodySize: 1000), forKey: "4")
        #expect(store.entry(forKey: "2") == nil)
        #expect(store.entry(forKey: "1") != nil)
        #expect(store.entry(forKey: "3") != nil)
        #expect(store.count == 3)
        #expect(store.size <= store.capacity)
        // An entry bigger than the whole store is not kept.
        store.setEntry(Self.entry("https://a/big", bodySize: one.cost * 4), forKey: "big")
        #expect(store.entry(forKey: "big") == nil)
        #expect(store.count == 3)
    }

    @Test
    func diskStoreSurvivesARestartWithEverythingIntactAndOwnerOnlyFiles() throws {
        let directory = temporaryDirectory("disk")
        defer { try? FileManager.default.removeItem(at: directory) }
        var entry = Self.entry("https://a/x", partition: "alice")
        entry.freshnessLimit = 30
        DiskCacheStore(directory: directory).setEntry(entry, forKey: "key-x")
        let reopened = DiskCacheStore(directory: directory)
        #expect(reopened.entry(forKey: "key-x") == entry)
        #expect(reopened.entry(forKey: "other") == nil)
        #expect(reopened.count == 1)
        #expect(posixPermissions(directory) == 0o700)
        let files = self.entryFiles(directory)
        #expect(files.count == 1)
        #expect(files.allSatisfy { posixPermissions($0) == 0o600 })
    }

    /// A directory that cannot be listed when the store first uses it (here a file stands at its
    /// path) is listed again on the next use. It was marked loaded all the same, so entries put
    /// there later were never found, counted against the capacity, nor removed by clearing.
    @Test
    func aDirectoryThatCouldNotBeListedIsListedAgainOnTheNextUse() throws {
        let directory = temporaryDirectory("unlisted")
        let writer = temporaryDirectory("writer")
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(at: writer)
        }
        #expect(FileManager.default.createFile(atPath: directory.path, contents: Data("not a directory".utf8)))
        let store = DiskCacheStore(directory: directory)
        #expect(store.count == 0)
        #expect(store.entry(forKey: "key-x") == nil)
        // The file goes; the directory comes, with an entry in it.
        try FileManager.default.removeItem(at: directory)
        let entry = Self.entry("https://a/x")
        DiskCacheStore(directory: writer).setEntry(entry, forKey: "key-x")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        for file in self.entryFiles(writer) {
            try FileManager.default.copyItem(at: file, to: directory.appendingPathComponent(file.lastPathComponent))
        }
        #expect(store.entry(forKey: "key-x") == entry)
        #expect(store.count == 1)
        store.removeEntries(in: .all)
        #expect(self.entryFiles(directory).isEmpty)
    }

    @Test
    func aFreshnessLimitJSONCannotHoldIsStoredAsWhatItMeans() throws {
        // JSON holds no infinity and no NaN: an entry with either was silently not stored. Below
        // zero or not a number, a limit forbids reuse, stale answers included: it stays one.
        let directory = temporaryDirectory("disk-limit")
        defer { try? FileManager.default.removeItem(at: directory) }
        let cases: [(String, TimeInterval, TimeInterval?)] = [
            ("inf", .infinity, nil), ("nan", .nan, -1), ("minus", -.infinity, -1), ("minus five", -5, -1), ("zero", 0, 0),
        ]
        do {
            let store = DiskCacheStore(directory: directory)
            for (key, limit, _) in cases {
                var entry = Self.entry("https://a/\(key)")
                entry.freshnessLimit = limit
                store.setEntry(entry, forKey: key)
            }
        }
        let reopened = DiskCacheStore(directory: directory)
        for (key, _, expected) in cases {
            let read = try #require(reopened.entry(forKey: key), "\(key)")
            #expect(read.freshnessLimit == expected, "\(key)")
        }
    }

    @Test
    func aLinkPlantedUnderAnEntrysNameIsNeitherFollowedNorCounted() throws {
        // Someone who can write to the cache directory links an entry's name to a valid entry
        // elsewhere (theirs): the store must not serve it, count it, or remove what it points at.
        let directory = temporaryDirectory("planted")
        let elsewhere = temporaryDirectory("elsewhere")
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(at: elsewhere)
        }
        DiskCacheStore(directory: elsewhere).setEntry(Self.entry("https://a/poisoned"), forKey: "k")
        let target = try #require(self.entryFiles(elsewhere).first)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let link = directory.appendingPathComponent(target.lastPathComponent)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: target)
        let store = DiskCacheStore(directory: directory)
        #expect(store.entry(forKey: "k") == nil)
        #expect(store.count == 0)
        #expect(store.size == 0)
        #expect(FileManager.default.fileExists(atPath: target.path))
        // The store's own entry under that key replaces nothing behind the link.
        store.setEntry(Self.entry("https://a/own"), forKey: "k")
        #expect(store.entry(forKey: "k")?.url == "https://a/own")
        #expect(DiskCacheStore(directory: elsewhere).entry(forKey: "k")?.url == "https://a/poisoned")
    }

    @Test(arguments: ["truncated", "flipped", "garbage", "empty"])
    func aCorruptDiskEntryIsAMissAndIsRemoved(_ damage: String) throws {
        let directory = temporaryDirectory("corrupt")
        defer { try? FileManager.default.removeItem(at: directory) }
        DiskCacheStore(directory: directory).setEntry(Self.entry("https://a/x", bodySize: 5000), forKey: "k")
        let file = try #require(self.entryFiles(directory).first)
        var bytes = try Data(contentsOf: file)
        switch damage {
        case "truncated": bytes = bytes.prefix(bytes.count - 100)
        case "flipped": bytes[bytes.count - 10] ^= 0xff
        case "garbage": bytes = Data("not a cache entry at all".utf8)
        default: bytes = Data()
        }
        try bytes.write(to: file)
        let reopened = DiskCacheStore(directory: directory)
        #expect(reopened.entry(forKey: "k") == nil)
        #expect(self.entryFiles(directory).isEmpty)
        #expect(reopened.count == 0)
    }

    @Test
    func aWriteInterruptedByACrashLeavesNoEntryAndItsLeftoverIsRemoved() throws {
        let directory = temporaryDirectory("crash")
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            // The store goes before the restart: a store made while another for the same
            // directory lives shares its index instead of reading the directory again.
            let store = DiskCacheStore(directory: directory)
            store.setEntry(Self.entry("https://a/old"), forKey: "k")
        }
        // A crash mid-write leaves only a temporary file; the entry under its final name is the old one.
        let leftover = directory.appendingPathComponent(".tmp-\(UUID().uuidString)")
        try Data("CRS1\0\0\0half".utf8).write(to: leftover)
        let reopened = DiskCacheStore(directory: directory)
        #expect(reopened.entry(forKey: "k")?.url == "https://a/old")
        #expect(!FileManager.default.fileExists(atPath: leftover.path))
    }

    /// A store pointed at a directory that holds other files (`courier request --cache ~/notes`)
    /// removed a user's `.tmp-notes` as its own leftover.
    @Test
    func aUsersFilesThatLookLikeLeftoversAreNotRemoved() throws {
        let directory = temporaryDirectory("users")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let names = [".tmp-notes", ".tmp-", "notes.txt", ".tmp-\(UUID().uuidString).bak"]
        for name in names { try Data("mine".utf8).write(to: directory.appendingPathComponent(name)) }
        let store = DiskCacheStore(directory: directory)
        store.setEntry(Self.entry("https://a/x"), forKey: "k")
        #expect(DiskCacheStore(directory: directory).entry(forKey: "k")?.url == "https://a/x")
        for name in names {
            #expect(try Data(contentsOf: directory.appendingPathComponent(name)) == Data("mine".utf8), "\(name)")
        }
    }

    @Test
    func diskStoreEvictsTheLeastRecentlyUsedByBytesAcrossRestarts() throws {
        let directory = temporaryDirectory("evict")
        defer { try? FileManager.default.removeItem(at: directory) }
        do {
            let store = DiskCacheStore(directory: directory, capacity: 3 * 1500)
            for index in 1...3 { store.setEntry(Self.entry("https://a/\(index)", bodySize: 1000), forKey: "\(index)") }
            #expect(store.count == 3)
            #expect(store.entry(forKey: "1") != nil)
            store.setEntry(Self.entry("https://a/4", bodySize: 1000), forKey: "4")
            #expect(store.entry(forKey: "2") == nil)
            #expect(self.entryFiles(directory).count == 3)
            #expect(store.size <= store.capacity)
        }
        // A smaller limit after a restart evicts down to it, oldest use first.
        let smaller = DiskCacheStore(directory: directory, capacity: 1500)
        #expect(smaller.count == 1)
        #expect(smaller.entry(forKey: "4") != nil)
    }

    /// Two stores on one directory in one process (two clients given the same cache directory):
    /// with an index each, neither saw the other's later entries nor counted their bytes, so the
    /// directory grew past every capacity.
    @Test
    func twoStoresOnOneDirectorySeeEachOthersEntriesAndKeepItsSizeBounded() throws {
        let directory = temporaryDirectory("shared")
        let link = temporaryDirectory("shared-link")
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(at: link)
        }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: directory)
        // The cache directory itself does not exist yet when the first store is made, through
        // the link; the second names it without the link.
        let first = DiskCacheStore(directory: link.appendingPathComponent("cache"), capacity: 3 * 1500)
        let second = DiskCacheStore(directory: directory.appendingPathComponent("cache"), capacity: 3 * 1500)
        let cache = directory.appendingPathComponent("cache")
        // Both have read the (empty) directory before either writes.
        #expect(first.count == 0)
        #expect(second.count == 0)
        first.setEntry(Self.entry("https://a/1", bodySize: 1000), forKey: "1")
        #expect(second.entry(forKey: "1")?.url == "https://a/1")
        for index in 2...5 {
            let store = index.isMultiple(of: 2) ? second : first
            store.setEntry(Self.entry("https://a/\(index)", bodySize: 1000), forKey: "\(index)")
        }
        #expect(self.entryFiles(cache).count == 3)
        #expect(first.size <= first.capacity)
        #expect(second.count == 3)
        #expect(first.entry(forKey: "1") == nil)
        #expect(first.entry(forKey: "4")?.url == "https://a/4")
        // Removing through one store is seen by the other.
        second.removeEntry(forKey: "5")
        #expect(first.entry(forKey: "5") == nil)
        #expect(first.count == 2)
    }

    @Test
    func removingByPartitionAndByURLDeletesFiles() throws {
        let directory = temporaryDirectory("scope")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = DiskCacheStore(directory: directory)
        store.setEntry(Self.entry("https://a/1", partition: "alice"), forKey: "a1")
        store.setEntry(Self.entry("https://a/2", partition: "alice"), forKey: "a2")
        store.setEntry(Self.entry("https://a/1", partition: "bob"), forKey: "b1")
        store.removeEntries(in: .partition("alice"))
        #expect(self.entryFiles(directory).count == 1)
        #expect(DiskCacheStore(directory: directory).entry(forKey: "b1") != nil)
        store.removeEntries(in: .url("https://a/1"))
        #expect(self.entryFiles(directory).isEmpty)
    }

    /// An app's own store: anything conforming to ``CacheStore`` plugs in.
    final class CountingStore: CacheStore {
        let entries = Locked([String: CacheEntry]())
        let reads = Locked(0)
        func entry(forKey key: String) -> CacheEntry? {
            self.reads.withLock { $0 += 1 }
            return self.entries.withLock { $0[key] }
        }
        func setEntry(_ entry: CacheEntry, forKey key: String) { self.entries.withLock { $0[key] = entry } }
        func removeEntry(forKey key: String) { self.entries.withLock { $0[key] = nil } }
        func removeEntries(in scope: CacheScope) { self.entries.withLock { $0 = [:] } }
    }

    @Test(arguments: TransportKind.allCases)
    func anAppsOwnStoreIsUsedByTheClient(_ kind: TransportKind) async throws {
        let store = CountingStore()
        let server = try await http1Server(CacheOrigin().handle)
        try await withClient(kind, server: server, configure: { $0.cache.store = store }) { client in
            _ = try await client.send(Endpoint<Article>(path: "/max-age"))
            let second = try await client.response(Endpoint<Article>(path: "/max-age"))
            #expect(second.source == .cache)
            #expect(store.reads.withLock { $0 } == 2)
            #expect(store.entries.withLock { $0.count } == 1)
        }
    }

    @Test(arguments: TransportKind.allCases)
    func aDiskCacheServesAcrossClientsAndACorruptEntryFallsBackToTheNetwork(_ kind: TransportKind) async throws {
        let directory = temporaryDirectory("client")
        defer { try? FileManager.default.removeItem(at: directory) }
        let server = try await http1Server(CacheOrigin().handle)
        let endpoint = Endpoint<Article>(path: "/max-age")
        try await withClient(kind, server: server, configure: { $0.cache.store = DiskCacheStore(directory: directory) }) { first in
            let original = try await first.send(endpoint)
            // A second client on the same directory: its store shares the first store's index
            // (a restart, with the index read again, is tested above).
            let second = Client(
                configuration: .init(transport: first.configuration.transport, baseURL: server.baseURL) {
                    $0.cache.store = DiskCacheStore(directory: directory)
                })
            let restarted = try await second.response(endpoint)
            #expect(restarted.source == .cache)
            #expect(restarted.value == original)
            #expect(server.requests.count == 1)

            let file = try #require(self.entryFiles(directory).first)
            let bytes = try Data(contentsOf: file)
            try bytes.prefix(bytes.count / 2).write(to: file)
            let afterDamage = try await second.response(endpoint)
            #expect(afterDamage.source == .network)
            #expect(server.requests.count == 2)
        }
    }
}
