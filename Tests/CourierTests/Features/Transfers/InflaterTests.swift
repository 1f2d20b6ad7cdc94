import Foundation
import Testing

@testable import Courier

#if canImport(Glibc)
import Glibc
#endif

/// The decoder of gzip and deflate bodies, chunk by chunk: chunk boundaries carry no meaning
/// (RFC 9112 §7.1), so any split of a body must decode to the same bytes.
@Suite("Content decoding, chunk by chunk")
struct InflaterTests {
    /// `body` decoded by an ``Inflater`` fed the given chunks.
    static func decode(_ chunks: [Data], coding: ContentCoding, limits: DecompressionLimits = DecompressionLimits()) throws -> Data {
        var inflater = Inflater(coding: coding, limits: limits)
        var output = Data()
        for chunk in chunks {
            try inflater.feed(chunk)
            while let piece = try inflater.produce() { output += piece }
        }
        while let piece = try inflater.finish() { output += piece }
        return output
    }

    static let text = Data(String(repeating: "a body that compresses well, ", count: 400).utf8)

    @Test(arguments: [1, 2, 3, 7, 100])
    func rawDeflateIsDecodedWhereverTheFirstChunkEnds(_ firstChunk: Int) async throws {
        // Raw deflate (no zlib wrapper, which some servers send for `deflate`): zlib first takes
        // the bytes as a zlib stream and may swallow a short first chunk before it finds the
        // wrapper missing; the retry without the wrapper must start at the body's first byte.
        let raw = try await runTool(
            [
                "python3", "-c",
                "import sys, zlib; c = zlib.compressobj(wbits=-15); sys.stdout.buffer.write(c.compress(sys.stdin.buffer.read()) + c.flush())",
            ],
            input: Self.text
        )
        let chunks = [raw.prefix(firstChunk), raw.dropFirst(firstChunk)].map { Data($0) }
        #expect(try Self.decode(chunks, coding: .deflate) == Self.text)
        // Byte by byte, too.
        #expect(try Self.decode(raw.map { Data([$0]) }, coding: .deflate) == Self.text)
    }

    @Test
    func rawDeflateLargerThanTheReplayLimitDecodesWhetherInOneChunkOrMany() async throws {
        // A first chunk past the 64 KiB the decoder keeps for a replay (one HTTP/2 read can be
        // 1 MiB): the retry without the wrapper still starts at the first byte. Random bytes,
        // so the compressed body is larger than the limit too.
        let body = payload(200_000, seed: 3)
        let raw = try await runTool(
            [
                "python3", "-c",
                "import sys, zlib; c = zlib.compressobj(wbits=-15); sys.stdout.buffer.write(c.compress(sys.stdin.buffer.read()) + c.flush())",
            ],
            input: body
        )
        #expect(raw.count > Inflater.replayLimit)
        #expect(try Self.decode([raw], coding: .deflate) == body)
        let split = stride(from: 0, to: raw.count, by: 10_000).map { Data(raw[$0..<min(raw.count, $0 + 10_000)]) }
        #expect(try Self.decode(split, coding: .deflate) == body)
    }

    /// zlib counts input in 32 bits: a piece of 4 GiB or more (a large request body in memory,
    /// compressed) trapped converting to one. Input now goes to zlib at most a piece limit at a
    /// time, the rest on the next round; shown with a small limit (4 GiB would not fit a test),
    /// whose output an independent decoder reads back whole.
    @Test(arguments: [1, 7, 65_537])
    func gzipFeedsZlibAtMostAPieceLimitAtATime(_ limit: Int) async throws {
        let original = payload(300_000, seed: 9) + Data(repeating: 0x61, count: 200_000)
        let compressed = try Deflater.gzip(original, pieceLimit: limit)
        #expect(compressed.count < original.count)
        #expect(try await runTool(["gzip", "-dc"], input: compressed) == original)
        #expect(try Self.decode([compressed], coding: .gzip) == original)
    }

    @Test
    func manyEmptyGzipMembersDecodeToNothingWithoutRecursion() throws {
        // RFC 1952 §2.2: members may be concatenated. Fifty thousand empty ones (20 bytes each,
        // one 1 MB chunk) once made one recursive call and one 256 KiB buffer per member.
        let empty = try Gzip.compress(Data())
        var body = Data()
        for _ in 0..<50_000 { body += empty }
        #expect(try Self.decode([body], coding: .gzip).isEmpty)
        // Followed by a member with content: that content, and nothing else.
        #expect(try Self.decode([body + (try Gzip.compress(Self.text))], coding: .gzip) == Self.text)
    }

    @Test
    func aServerSentEventsFieldIsSplitAtTheColonCodePoint() throws {
        // WHATWG HTML §9.2.6: the field name ends at the first U+003A, and one U+0020 after it
        // is dropped, whatever follows: `:\u{301}` and ` \u{301}` are single Swift characters.
        for line in ["data:\u{301}x", "data: \u{301}x"] {
            var parser = ServerSentEventParser()
            #expect(try parser.feed(line) == nil)
            #expect(try parser.feed("")?.data == "\u{301}x", "\(line.unicodeScalars.map(\.value))")
        }
        // A comment starts with a colon, even one a combining mark follows.
        var parser = ServerSentEventParser()
        #expect(try parser.feed(":\u{301}comment") == nil)
        #expect(try parser.feed("") == nil)
    }

    @Test
    func aCorruptDeflateBodyIsStillAnError() {
        // Neither a zlib stream nor raw deflate: the retry without the wrapper fails too.
        let garbage = Data((0..<200).map { UInt8(($0 * 37 + 11) % 256) })
        #expect(throws: CourierError.self) {
            _ = try Self.decode([garbage.prefix(1), garbage.dropFirst(1)].map { Data($0) }, coding: .deflate)
        }
    }

    /// RFC 8878 §3.1: a zstd body may hold many frames, each decoded in turn; 20,000 empty ones
    /// (9 bytes each) decode to nothing, and frames with content to their bytes in order, in
    /// chunks of any size. (Each call uses one output buffer, however many frames it passes.)
    @Test(arguments: [7, 4096, 1 << 20])
    func manyZstdFramesDecodeInOrder(pieceSize: Int) throws {
        let empty = ContentEncoder.zstd(Data())
        let emptyFrames = Data(repeating: 0, count: 0) + (0..<20_000).reduce(into: Data()) { body, _ in body += empty }
        #expect(try ContentDecoding.decode(emptyFrames, coding: "zstd", pieceSize: pieceSize, limits: DecompressionLimits()).isEmpty)
        let parts = (0..<50).map { Data("part \($0);".utf8) }
        let framed = parts.reduce(into: Data()) { body, part in body += ContentEncoder.zstd(part) + empty }
        let decoded = try ContentDecoding.decode(framed, coding: "zstd", pieceSize: pieceSize, limits: DecompressionLimits())
        #expect(decoded == parts.reduce(Data(), +))
    }

    /// Bytes after a complete brotli stream are not brotli: kind `decoding`, not a silent stop.
    @Test
    func bytesAfterABrotliStreamAreCorrupt() throws {
        let body = ContentEncoder.brotli(Data("whole".utf8)) + Data("tail".utf8)
        #expect(throws: CourierError.self) { try ContentDecoding.decode(body, coding: "br", pieceSize: 3, limits: DecompressionLimits()) }
        do {
            _ = try ContentDecoding.decode(body, coding: "br", pieceSize: 1 << 20, limits: DecompressionLimits())
        } catch let error as CourierError {
            #expect(error.kind == .decoding)
        }
    }
}

extension InflaterTests {
    /// Raw deflate (no trailer) whose decoded length is just past a whole number of the decoder's
    /// 256 KiB pieces: zlib can take the last input byte while the output buffer is full and
    /// still owe a few decoded bytes. They must come out, and the body end without a
    /// "truncated" error, fed whole or in two chunks. (A guard: no such case was found failing.)
    @Test
    func rawDeflateJustPastAPieceBoundaryDecodesWhole() async throws {
        let script = """
            import random, struct, sys, zlib
            random.seed(7)
            table = bytes(b"abcdefghijklmnop"[b & 15] for b in range(256))
            out = []
            for pieces in (1, 2):
                for extra in range(1, 25):
                    plain = random.randbytes(pieces * 262144 + extra).translate(table)
                    c = zlib.compressobj(9, zlib.DEFLATED, -15)
                    raw = c.compress(plain) + c.flush()
                    out += [struct.pack(">I", len(plain)), plain, struct.pack(">I", len(raw)), raw]
            sys.stdout.buffer.write(b"".join(out))
            """
        let data = try await runTool(["python3", "-c", script], input: Data())
        var offset = data.startIndex
        func take() -> Data {
            let length = data[offset..<offset + 4].reduce(0) { $0 << 8 | Int($1) }
            defer { offset += 4 + length }
            return Data(data[offset + 4..<offset + 4 + length])
        }
        var cases = 0
        while offset < data.endIndex {
            let plain = take()
            let raw = take()
            #expect(try Self.decode([raw], coding: .deflate) == plain, "decoded length \(plain.count), whole")
            let half = raw.count / 2
            #expect(try Self.decode([raw.prefix(half), raw.dropFirst(half)].map { Data($0) }, coding: .deflate) == plain)
            cases += 1
        }
        #expect(cases == 48)
    }
}

extension InflaterTests {
    #if canImport(Glibc)
    /// A short decoded piece is a buffer of its own size: before, each piece was the decoder's
    /// 256 KiB buffer cut short, which kept all of it allocated (a 1 KB gzip body held 256 KiB in
    /// a collected body, and in the memory cache, whose cost counted 1 KB). Linux only: it asks
    /// glibc (`malloc_usable_size`) how large the piece's allocation is.
    @Test(arguments: ["gzip", "br", "zstd"])
    func aShortPieceDoesNotKeepTheDecodersBuffer(_ coding: String) throws {
        let body = Data((0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 7919) })
        let encoded: Data
        switch coding {
        case "gzip": encoded = try Gzip.compress(body)
        case "br": encoded = ContentEncoder.brotli(body)
        default: encoded = ContentEncoder.zstd(body)
        }
        var pieces: [Data] = []
        if coding == "gzip" {
            var inflater = Inflater(coding: .gzip, limits: DecompressionLimits())
            try inflater.feed(encoded)
            while let piece = try inflater.produce() { pieces.append(piece) }
        } else {
            var decoder = BrotliOrZstdDecoder(coding: coding == "br" ? .br : .zstd, limits: DecompressionLimits())
            try decoder.feed(encoded)
            while let piece = try decoder.produce() { pieces.append(piece) }
        }
        #expect(pieces.reduce(Data(), +) == body)
        // glibc's malloc_usable_size (in <malloc.h>, which the Glibc module does not export).
        typealias UsableSize = @convention(c) (UnsafeMutableRawPointer?) -> Int
        let symbol = try #require(dlsym(nil, "malloc_usable_size"))
        let usableSize = unsafeBitCast(symbol, to: UsableSize.self)
        for piece in pieces {
            let allocated = piece.withUnsafeBytes { usableSize(UnsafeMutableRawPointer(mutating: $0.baseAddress)) }
            #expect(allocated >= piece.count)
            #expect(allocated < 16 * 1024)
        }
    }
    #endif
}
