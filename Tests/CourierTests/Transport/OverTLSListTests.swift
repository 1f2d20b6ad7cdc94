import Foundation
import Testing

/// The tests over TLS that run on URLSession only in `scripts/test-urlsession-tls.sh` (their
/// transports are ``TransportKind/overTLS``): the script names each, so none is left out of it.
@Suite("The URLSession-over-TLS script names every test over TLS")
struct OverTLSListTests {
    /// `Suite/function` for each test whose arguments are the transports over TLS.
    static func testsOverTLS() throws -> Set<String> {
        let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        let files = FileManager.default.enumerator(at: tests, includingPropertiesForKeys: nil)?.compactMap { $0 as? URL } ?? []
        var found: Set<String> = []
        for file in files where file.pathExtension == "swift" {
            let text = try String(contentsOf: file, encoding: .utf8)
            let suite = file.deletingPathExtension().lastPathComponent
            var rest = text[...]
            while let attribute = rest.range(of: "@Test(arguments: ") {
                let after = rest[attribute.upperBound...]
                guard let function = after.range(of: "func ") else { break }
                let arguments = after[..<function.lowerBound]
                let name = after[function.upperBound...].prefix { $0 != "(" }
                if arguments.contains("TransportKind.overTLS") || arguments.contains("GoAwayCase.all") {
                    found.insert("\(suite)/\(name)")
                }
                rest = after[function.upperBound...]
            }
        }
        return found
    }

    @Test
    func theScriptRunsEachOfThem() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let script = try String(contentsOf: root.appendingPathComponent("scripts/test-urlsession-tls.sh"), encoding: .utf8)
        let listed = Set(
            script.split(separator: "\n").compactMap { line -> String? in
                let trimmed = line.trimmingCharacters(in: .whitespaces)
                guard trimmed.hasPrefix("'"), trimmed.hasSuffix("'"), trimmed.contains("/") else { return nil }
                return String(trimmed.dropFirst().dropLast())
            })
        let inSources = try Self.testsOverTLS()
        #expect(inSources.count >= 15)
        #expect(inSources.subtracting(listed).isEmpty, "not run by the script: \(inSources.subtracting(listed).sorted())")
        #expect(listed.subtracting(inSources).isEmpty, "listed but not over TLS: \(listed.subtracting(inSources).sorted())")
    }
}
