import CZlib
import Foundation

/// Limits on decompressed response bodies, against decompression bombs.
public struct DecompressionLimits: Sendable, Hashable {
    /// The most decoded bytes per compressed byte, checked once more than ``ratioFloor`` bytes are decoded.
    public var maxRatio: Int
    /// Decoded bytes below which the ratio is not checked (small bodies may compress very well).
    public var ratioFloor: Int
    /// The most decoded bytes in total; `nil` for no limit beyond the ratio (downloads).
    public var maxSize: Int?

    /// Creates limits.
    public init(maxRatio: Int = 200, ratioFloor: Int = 1 << 20, maxSize: Int? = nil) {
        self.maxRatio = maxRatio
        self.ratioFloor = ratioFloor
        self.maxSize = maxSize
    }
}

extension DecompressionLimits {
    /// Throws kind `responseTooLarge` when `decoded` bytes from `compressed` pass the limits.
    func check(decoded: Int, compressed: Int) throws {
        if let maxSize = self.maxSize, decoded > maxSize {
            var error = CourierError(.responseTooLarge, "the decompressed response body is larger than \(maxSize) bytes")
            error.limit = maxSize
            throw error
        }
        let (allowed, overflow) = self.maxRatio.multipliedReportingOverflow(by: max(compressed, 1))
        if decoded > self.ratioFloor, !overflow, decoded > allowed {
            throw CourierError(
                .responseTooLarge,
                "the response body expands more than \(self.maxRatio) times when decompressed (a decompression bomb?)")
        }
    }

    /// Throws kind `responseTooLarge` when `compressed` bytes are more than any body within
    /// ``maxSize`` can take on the wire. Bytes that decode to nothing — zero padding after the
    /// stream, empty gzip members, empty zstd frames — count here, or a small body followed by
    /// endless padding would hold the connection until the deadline, and then succeed.
    func checkCompressed(_ compressed: Int) throws {
        guard let maxSize = self.maxSize, compressed > Self.compressedLimit(for: maxSize) else { return }
        var error = CourierError(
            .responseTooLarge, "the compressed response body is longer than any body of at most \(maxSize) bytes can be")
        error.limit = maxSize
        throw error
    }

    /// The most compressed bytes a body of `maxSize` decoded bytes may take: itself, and room
    /// for a coding's framing of bytes it could not compress (a stored deflate block costs 5
    /// bytes in 64 KiB; zstd's and brotli's raw blocks less).
    static func compressedLimit(for maxSize: Int) -> Int {
        let (limit, overflow) = maxSize.addingReportingOverflow(maxSize / 256 + 4096)
        return overflow ? .max : limit
    }
}

/// What every streaming decoder of a content coding keeps: the compressed piece being worked
/// through, the totals the ``DecompressionLimits`` are checked against, and the errors a body
/// gets — one set of rules for gzip, deflate, br and zstd.
struct DecodeProgress {
    let coding: ContentCoding
    let limits: DecompressionLimits
    /// The compressed piece fed last, and how much of it the decoder has taken.
    private(set) var input = Data()
    var inputOffset = 0
    private(set) var compressedTotal = 0
    private(set) var decodedTotal = 0

    init(coding: ContentCoding, limits: DecompressionLimits) {
        self.coding = coding
        self.limits = limits
    }

    /// Whether some of the piece fed last is still to be decoded.
    var hasInput: Bool { self.inputOffset < self.input.count }

    /// Takes the next compressed piece; throws kind `responseTooLarge` once the compressed bytes
    /// pass what a body within the size limit can take.
    mutating func feed(_ input: Data) throws {
        self.compressedTotal += input.count
        try self.limits.checkCompressed(self.compressedTotal)
        self.input = input
        self.inputOffset = 0
    }

    /// Starts again from `input` (already counted) at its first byte.
    mutating func replay(_ input: Data) {
        self.input = input
        self.inputOffset = 0
    }

    /// Counts a decoder step: `consumed` compressed bytes taken, `produced` decoded bytes out;
    /// throws kind `responseTooLarge` past the limits.
    mutating func advance(consumed: Int, produced: Int) throws {
        self.inputOffset += consumed
        self.decodedTotal += produced
        try self.limits.check(decoded: self.decodedTotal, compressed: self.compressedTotal)
    }

    /// The end of the body: kind `transport` unless the compressed stream ended too (or the
    /// body was empty) — a body cut short on the way.
    func finish(streamEnded: Bool) throws {
        guard streamEnded || self.compressedTotal == 0 else {
            throw CourierError(.transport, "the compressed response body ended early (truncated \(self.coding.rawValue) data)")
        }
    }

    /// Kind `decoding`: bytes the decoder refuses.
    static func corrupt(_ reason: String) -> CourierError {
        CourierError(.decoding, "the compressed response body is corrupt: \(reason)")
    }
}

/// The content codings Courier decodes (RFC 9110 §8.4.1; br: RFC 7932, zstd: RFC 9659). br and
/// zstd need the system's brotli and zstd libraries, which Courier links on Linux only.
enum ContentCoding: String, Sendable {
    case gzip
    case deflate
    #if canImport(CBrotli) && canImport(CZstd)
    case br
    case zstd
    #endif

    /// What `Accept-Encoding` offers: the codings this build can decode.
    static var offered: String {
        #if canImport(CBrotli) && canImport(CZstd)
        "gzip, deflate, br, zstd"
        #else
        "gzip, deflate"
        #endif
    }

    /// The single coding a response's `Content-Encoding` names, `nil` for identity; throws for
    /// codings Courier cannot decode (so the body is never handed up still encoded).
    static func of(_ value: String?) throws -> ContentCoding? {
        guard let value else { return nil }
        let codings = FieldText.split(value, at: ",").map { FieldText.token($0) }.filter {
            !$0.isEmpty && $0 != "identity"
        }
        if codings.isEmpty { return nil }
        guard codings.count == 1 else {
            throw CourierError(.decoding, "the response uses several content codings (\(value)); only one of \(Self.offered) is supported")
        }
        switch codings[0] {
        case "gzip", "x-gzip": return .gzip
        case "deflate": return .deflate
        #if canImport(CBrotli) && canImport(CZstd)
        case "br": return .br
        case "zstd": return .zstd
        #endif
        default: throw CourierError(.decoding, "the response's content coding '\(codings[0])' is not supported")
        }
    }
}

/// A zlib stream: the `z_stream` must not move once initialised (zlib keeps a pointer to it).
private final class ZStream {
    let stream: UnsafeMutablePointer<z_stream>
    let inflating: Bool

    init(inflating: Bool, windowBits: Int32) throws {
        self.stream = .allocate(capacity: 1)
        self.stream.initialize(to: z_stream())
        self.inflating = inflating
        let size = Int32(MemoryLayout<z_stream>.size)
        let status =
            inflating
            ? inflateInit2_(self.stream, windowBits, zlibVersion(), size)
            : deflateInit2_(self.stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, windowBits, 8, Z_DEFAULT_STRATEGY, zlibVersion(), size)
        guard status == Z_OK else {
            self.stream.deallocate()
            throw CourierError(.decoding, "zlib could not start (status \(status))")
        }
    }

    deinit {
        if self.inflating { inflateEnd(self.stream) } else { deflateEnd(self.stream) }
        self.stream.deallocate()
    }
}

/// Decodes a gzip or deflate body piece by piece, within ``DecompressionLimits``.
struct Inflater: ChunkTransformer {
    private var zstream: ZStream?
    /// Why zlib could not start (out of memory), thrown on the first read.
    private var startError: (any Error)?
    private var progress: DecodeProgress
    private var coding: ContentCoding { self.progress.coding }
    private var ended = false
    private var triedRaw = false
    /// The body's bytes so far while a deflate body has produced nothing: replayed from the start
    /// if it turns out to be raw deflate (zlib may have taken in bytes of earlier chunks before
    /// it saw the missing wrapper). `nil` once not needed, or past ``replayLimit``.
    private var replay: Data? = Data()
    /// The most bytes kept for a replay.
    static let replayLimit = 64 * 1024
    /// The most output produced per call.
    static let pieceSize = 256 * 1024

    /// The first `produced` bytes of `buffer`, as a piece of their own size: a short piece is
    /// copied out, so it does not keep the whole buffer alive where it goes (a collected body, the
    /// cache, a stream reader's hands: a 1 KB body held 256 KiB).
    static func piece(of buffer: Data, produced: Int) -> Data {
        guard produced < buffer.count else { return buffer }
        return buffer.withUnsafeBytes { Data(bytes: $0.baseAddress!, count: produced) }
    }

    init(coding: ContentCoding, limits: DecompressionLimits) {
        self.progress = DecodeProgress(coding: coding, limits: limits)
        do {
            // 15 + 32: zlib or gzip header detected automatically.
            self.zstream = try ZStream(inflating: true, windowBits: 15 + 32)
        } catch {
            self.startError = error
        }
    }

    mutating func feed(_ input: Data) throws {
        try self.progress.feed(input)
        // The first chunk is kept whatever its size (it is in memory anyway, and one read of a
        // stream can bring far more than the limit); later ones while the total stays within it.
        let first = self.replay?.isEmpty == true
        if self.coding == .deflate, !self.triedRaw, self.progress.decodedTotal == 0,
            first || self.progress.compressedTotal <= Self.replayLimit
        {
            self.replay?.append(input)
        } else {
            self.replay = nil
        }
    }

    /// The next piece of decoded bytes, or `nil` when the input fed so far gives none. A loop,
    /// not recursion: a body of many empty gzip members (20 bytes each) produces nothing for a
    /// long time, and must neither deepen the stack nor allocate a buffer per member.
    mutating func produce() throws -> Data? {
        if let startError = self.startError { throw startError }
        var output: Data?
        while true {
            guard self.progress.hasInput, let zstream = self.zstream else { return nil }
            if self.ended {
                // After the end of a stream: zero padding is ignored, another gzip member is decoded
                // (RFC 1952 allows several), anything else is an error.
                let input = self.progress.input
                let rest = input[(input.startIndex + self.progress.inputOffset)...]
                if !rest.contains(where: { $0 != 0 }) {
                    self.progress.inputOffset = input.count
                    return nil
                }
                guard self.coding == .gzip, inflateReset(zstream.stream) == Z_OK else {
                    throw DecodeProgress.corrupt("data after the end of the compressed stream")
                }
                self.ended = false
            }
            if output == nil { output = Data(count: Self.pieceSize) }
            let stream = zstream.stream
            let offset = self.progress.inputOffset
            let (status, consumed, produced) = self.progress.input.withUnsafeBytes {
                (inBuffer: UnsafeRawBufferPointer) -> (Int32, Int, Int) in
                output!.withUnsafeMutableBytes { (outBuffer: UnsafeMutableRawBufferPointer) -> (Int32, Int, Int) in
                    // zlib's counts are 32-bit: at most 4 GiB − 1 a call, the rest on the next.
                    let available = min(inBuffer.count - offset, Int(UInt32.max))
                    stream.pointee.next_in = UnsafeMutablePointer(
                        mutating: inBuffer.baseAddress!.advanced(by: offset).assumingMemoryBound(to: Bytef.self))
                    stream.pointee.avail_in = uInt(available)
                    stream.pointee.next_out = outBuffer.baseAddress!.assumingMemoryBound(to: Bytef.self)
                    stream.pointee.avail_out = uInt(outBuffer.count)
                    let status = inflate(stream, Z_NO_FLUSH)
                    return (status, available - Int(stream.pointee.avail_in), outBuffer.count - Int(stream.pointee.avail_out))
                }
            }
            switch status {
            case Z_OK, Z_BUF_ERROR:
                break
            case Z_STREAM_END:
                self.ended = true
            case Z_DATA_ERROR where self.coding == .deflate && !self.triedRaw && self.progress.decodedTotal == 0 && self.replay != nil:
                // Some servers send raw deflate without the zlib wrapper RFC 9110 asks for: the
                // body is decoded again from its first byte, without the wrapper.
                self.triedRaw = true
                self.zstream = try ZStream(inflating: true, windowBits: -15)
                self.progress.replay(self.replay ?? Data())
                self.replay = nil
                continue
            default:
                let reason = stream.pointee.msg.map { String(cString: $0) } ?? "status \(status)"
                throw DecodeProgress.corrupt(reason)
            }
            if consumed == 0, produced == 0, status != Z_STREAM_END {
                throw DecodeProgress.corrupt("zlib made no progress")
            }
            if produced > 0 { self.replay = nil }
            try self.progress.advance(consumed: consumed, produced: produced)
            guard produced > 0 else { continue }
            return Self.piece(of: output!, produced: produced)
        }
    }

    mutating func finish() throws -> Data? {
        try self.progress.finish(streamEnded: self.ended)
        return nil
    }
}

/// Compresses a body with gzip, piece by piece.
struct Deflater: ChunkTransformer {
    private let zstream: Result<ZStream, CourierError>
    private var input = Data()
    private var inputOffset = 0
    private var finished = false
    /// The most input handed to zlib in one call: its counts are 32-bit (`uInt`), and a piece of
    /// 4 GiB or more (a large body in memory) trapped converting to one.
    private let pieceLimit: Int

    /// Creates a compressor; when zlib cannot start (out of memory), the first use throws.
    init(pieceLimit: Int = Int(UInt32.max)) {
        self.pieceLimit = max(pieceLimit, 1)
        do {
            self.zstream = .success(try ZStream(inflating: false, windowBits: 15 + 16))
        } catch {
            self.zstream = .failure(CourierError.wrap(error))
        }
    }

    mutating func feed(_ input: Data) throws {
        self.input = input
        self.inputOffset = 0
    }

    mutating func produce() throws -> Data? {
        // A loop, not a call of its own per round: zlib may take many pieces before it writes.
        while self.inputOffset < self.input.count {
            let output = try self.run(flush: Z_NO_FLUSH)
            if !output.isEmpty { return output }
        }
        return nil
    }

    mutating func finish() throws -> Data? {
        guard !self.finished else { return nil }
        self.input = Data()
        self.inputOffset = 0
        return try self.run(flush: Z_FINISH)
    }

    private mutating func run(flush: Int32) throws -> Data {
        var output = Data(count: 64 * 1024)
        let stream = try self.zstream.get().stream
        let offset = self.inputOffset
        let limit = self.pieceLimit
        let (status, consumed, produced) = self.input.withUnsafeBytes { (inBuffer: UnsafeRawBufferPointer) -> (Int32, Int, Int) in
            output.withUnsafeMutableBytes { (outBuffer: UnsafeMutableRawBufferPointer) -> (Int32, Int, Int) in
                let available = min(inBuffer.count - offset, limit)
                stream.pointee.next_in =
                    available > 0
                    ? UnsafeMutablePointer(mutating: inBuffer.baseAddress!.advanced(by: offset).assumingMemoryBound(to: Bytef.self)) : nil
                stream.pointee.avail_in = uInt(available)
                stream.pointee.next_out = outBuffer.baseAddress!.assumingMemoryBound(to: Bytef.self)
                stream.pointee.avail_out = uInt(outBuffer.count)
                let status = deflate(stream, flush)
                return (status, available - Int(stream.pointee.avail_in), outBuffer.count - Int(stream.pointee.avail_out))
            }
        }
        guard status == Z_OK || status == Z_STREAM_END || status == Z_BUF_ERROR else {
            throw CourierError(.invalidRequest, "gzip compression of the request body failed (status \(status))")
        }
        if status == Z_STREAM_END { self.finished = true }
        self.inputOffset += consumed
        output.count = produced
        return output
    }

    /// `data` compressed with gzip in one go.
    static func gzip(_ data: Data, pieceLimit: Int = Int(UInt32.max)) throws -> Data {
        var deflater = Deflater(pieceLimit: pieceLimit)
        var result = Data()
        try deflater.feed(data)
        while let piece = try deflater.produce() { result.append(piece) }
        while let piece = try deflater.finish() { result.append(piece) }
        return result
    }
}

extension ResponseBody {
    /// The body with its content coding removed, within `limits`.
    func decoded(_ coding: ContentCoding, limits: DecompressionLimits) -> ResponseBody {
        switch coding {
        case .gzip, .deflate:
            return .stream(self.byteStream.transformed { Inflater(coding: coding, limits: limits) }, expectedLength: nil)
        #if canImport(CBrotli) && canImport(CZstd)
        case .br, .zstd:
            return .stream(self.byteStream.transformed { BrotliOrZstdDecoder(coding: coding, limits: limits) }, expectedLength: nil)
        #endif
        }
    }
}

/// gzip in one call, for tests and tools in this package.
package enum Gzip {
    /// `data` compressed with gzip.
    package static func compress(_ data: Data) throws -> Data { try Deflater.gzip(data) }
}

/// Content decoding without a stream, for the fuzz targets and tests of this package.
package enum ContentDecoding {
    /// `body` decoded from `coding` as a response body is, fed in pieces of `pieceSize` bytes;
    /// throws what the response body would (a ``CourierError``).
    package static func decode(_ body: Data, coding: String, pieceSize: Int, limits: DecompressionLimits) throws -> Data {
        guard let coding = try ContentCoding.of(coding) else { return body }
        switch coding {
        case .gzip, .deflate:
            return try Self.run(Inflater(coding: coding, limits: limits), body, pieceSize: pieceSize)
        #if canImport(CBrotli) && canImport(CZstd)
        case .br, .zstd:
            return try Self.run(BrotliOrZstdDecoder(coding: coding, limits: limits), body, pieceSize: pieceSize)
        #endif
        }
    }

    private static func run<Transformer: ChunkTransformer>(_ transformer: Transformer, _ body: Data, pieceSize: Int) throws -> Data {
        var transformer = transformer
        var output = Data()
        var offset = body.startIndex
        let step = max(pieceSize, 1)
        while offset < body.endIndex {
            let end = body.index(offset, offsetBy: step, limitedBy: body.endIndex) ?? body.endIndex
            try transformer.feed(Data(body[offset..<end]))
            while let piece = try transformer.produce() { output += piece }
            offset = end
        }
        while let piece = try transformer.finish() { output += piece }
        return output
    }
}
