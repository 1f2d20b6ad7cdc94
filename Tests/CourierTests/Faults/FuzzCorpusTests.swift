import CourierFuzzTargets
import Foundation
import Testing

/// Replays the committed fuzz corpora (`Fuzz/corpus/<target>/`: seeds, and every input a fuzzer
/// once crashed on, kept as a regression) through each target, in process: a target's checks are
/// preconditions, so a regression stops the test run.
@Suite("Fuzz corpora replayed")
struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/corpus")

    @Test(arguments: FuzzTargets.all.map(\.name))
    func everyCorpusInputPassesItsTarget(_ name: String) throws {
        let target = try #require(FuzzTargets.target(named: name))
        let directory = Self.corpus.appendingPathComponent(name)
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(files.count >= 3, "a corpus of \(files.count) inputs for \(name)")
        for file in files {
            target.run(try Data(contentsOf: directory.appendingPathComponent(file)))
        }
    }

    @Test func everyCorpusDirectoryBelongsToATarget() throws {
        let directories = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).sorted()
        #expect(directories == FuzzTargets.all.map(\.name).sorted())
    }
}
