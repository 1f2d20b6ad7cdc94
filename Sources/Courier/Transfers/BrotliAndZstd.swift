#if canImport(CBrotli) && canImport(CZstd)
import CBrotli
import CZstd
import Foundation

/// A brotli decoder state (RFC 7932), freed with its owner.
private final class BrotliState {
    let state: OpaquePointer

    init() throws {
        guard let state = BrotliDecoderCreateInstance(nil, nil, nil) else {
            throw CourierError(.decoding, "brotli could not start (out of memory)")
        }
        self.state = state
    }

    deinit { BrotliDecoderDestroyInstance(self.state) }
}

/// A zstd decompression context (RFC 8878), freed with its owner.
private final class ZstdContext {
    let context: OpaquePointer

    init() throws {
        guard let context = ZSTD_createDCtx() else { throw CourierError(.decoding, "zstd could not start (out of memory)") }
        // RFC 9659 §3: a window of 8 MB is what an HTTP recipient must support, and the most it
        // needs to: a frame asking for more is refused rather than allowed to take the memory.
        let status = ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, 23)
        guard ZSTD_isError(status) == 0 else {
            ZSTD_freeDCtx(context)
            throw CourierError(.decoding, "zstd could not start: \(String(cString: ZSTD_getErrorName(status)))")
        }
        self.context = context
    }

    deinit { ZSTD_freeDCtx(self.context) }
}

/// Decodes a `br` or `zstd` body piece by piece, within ``DecompressionLimits``.
///
/// A body that ends before its stream does is kind `transport` (cut short on the way), bytes the
/// decoder refuses are kind `decoding`, and output past the limits is kind `responseTooLarge`,
/// as for gzip and deflate.
struct BrotliOrZstdDecoder: ChunkTransformer {
    private enum Engine {
        case brotli(BrotliState)
        case zstd(ZstdContext)
    }

    private var engine: Engine?
    /// Why the decoder could not start, thrown on the first read.
    private var startError: (any Error)?
    private var progress: DecodeProgress
    /// Whether the input so far ends at the end of a stream (brotli) or of a frame (zstd).
    private var atEnd = false
    /// Whether the decoder asked for more output room on its last step (brotli and zstd may hold
    /// decoded bytes back until there is room): `produce` steps again even with no input left.
    private var mayHaveMore = false

    init(coding: ContentCoding, limits: DecompressionLimits) {
        self.progress = DecodeProgress(coding: coding, limits: limits)
        do {
            self.engine = coding == .zstd ? .zstd(try ZstdContext()) : .brotli(try BrotliState())
        } catch {
            self.startError = error
        }
    }

    mutating func feed(_ input: Data) throws {
        try self.progress.feed(input)
    }

    /// The next piece of decoded bytes, or `nil` when the input fed so far gives none. One
    /// output buffer per call, however many steps it takes: a body of many empty zstd frames
    /// (9 bytes each) produces nothing for a long time and must not cost a buffer per frame.
    mutating func produce() throws -> Data? {
        if let startError = self.startError { throw startError }
        guard let engine = self.engine else { return nil }
        var output: Data?
        while true {
            // brotli may hold decoded bytes back until it has room for them: ask again while it
            // says so, even with no input left.
            guard self.progress.hasInput || self.mayHaveMore else { return nil }
            if output == nil { output = Data(count: Inflater.pieceSize) }
            let (consumed, produced, state) = try self.step(engine, into: &output!)
            self.mayHaveMore = state == .needsOutput
            if state == .ended { self.atEnd = true } else if consumed > 0 || produced > 0 { self.atEnd = false }
            try self.progress.advance(consumed: consumed, produced: produced)
            if produced > 0 { return Inflater.piece(of: output!, produced: produced) }
            if consumed == 0 && state != .needsOutput { return nil }
        }
    }

    private enum StepState { case needsInput, needsOutput, ended }

    /// One call of the decoder over the pending input into `output`.
    private func step(_ engine: Engine, into output: inout Data) throws -> (consumed: Int, produced: Int, state: StepState) {
        let offset = self.progress.inputOffset
        return try self.progress.input.withUnsafeBytes { (inBuffer: UnsafeRawBufferPointer) in
            try output.withUnsafeMutableBytes { (outBuffer: UnsafeMutableRawBufferPointer) in
                let available = inBuffer.count - offset
                let inStart = inBuffer.baseAddress.map { $0.advanced(by: offset) }
                switch engine {
                case .brotli(let brotli):
                    var availableIn = available
                    var nextIn = inStart?.assumingMemoryBound(to: UInt8.self)
                    var availableOut = outBuffer.count
                    var nextOut = outBuffer.baseAddress?.assumingMemoryBound(to: UInt8.self)
                    let result = BrotliDecoderDecompressStream(brotli.state, &availableIn, &nextIn, &availableOut, &nextOut, nil)
                    let consumed = available - availableIn
                    let produced = outBuffer.count - availableOut
                    switch result {
                    case BROTLI_DECODER_RESULT_SUCCESS:
                        // RFC 7932: one stream per body; bytes after it are not brotli.
                        if availableIn > 0 { throw Self.corrupt("data after the end of the brotli stream") }
                        return (consumed, produced, .ended)
                    case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT: return (consumed, produced, .needsInput)
                    case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT: return (consumed, produced, .needsOutput)
                    default:
                        let reason = String(cString: BrotliDecoderErrorString(BrotliDecoderGetErrorCode(brotli.state)))
                        throw Self.corrupt(reason)
                    }
                case .zstd(let zstd):
                    var inDescriptor = ZSTD_inBuffer(src: inStart, size: available, pos: 0)
                    var outDescriptor = ZSTD_outBuffer(dst: outBuffer.baseAddress, size: outBuffer.count, pos: 0)
                    let result = ZSTD_decompressStream(zstd.context, &outDescriptor, &inDescriptor)
                    if ZSTD_isError(result) != 0 { throw Self.corrupt(String(cString: ZSTD_getErrorName(result))) }
                    let consumed = inDescriptor.pos
                    let produced = outDescriptor.pos
                    // 0: a frame is decoded and flushed (another may follow, RFC 8878 §3.1);
                    // a full output buffer may hold more back.
                    if result == 0 { return (consumed, produced, .ended) }
                    return (consumed, produced, produced == outBuffer.count ? .needsOutput : .needsInput)
                }
            }
        }
    }

    mutating func finish() throws -> Data? {
        if let startError = self.startError { throw startError }
        // `produce` was called until it returned nil, which it does only once nothing is held back.
        try self.progress.finish(streamEnded: self.atEnd)
        return nil
    }

    private static func corrupt(_ reason: String) -> CourierError { DecodeProgress.corrupt(reason) }
}

/// brotli and zstd compression in one call, for tests and tools in this package.
package enum ContentEncoder {
    /// `data` compressed with brotli (quality 5).
    package static func brotli(_ data: Data) -> Data {
        var size = BrotliEncoderMaxCompressedSize(data.count)
        if size == 0 { size = data.count + 1024 }
        var output = Data(count: size)
        let ok = data.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { out in
                BrotliEncoderCompress(
                    5, BROTLI_DEFAULT_WINDOW, BROTLI_MODE_GENERIC, input.count, input.baseAddress?.assumingMemoryBound(to: UInt8.self),
                    &size, out.baseAddress!.assumingMemoryBound(to: UInt8.self))
            }
        }
        precondition(ok == BROTLI_TRUE, "brotli compression failed")
        output.count = size
        return output
    }

    /// `data` compressed with zstd (level 3), as one frame.
    package static func zstd(_ data: Data) -> Data {
        var output = Data(count: ZSTD_compressBound(data.count))
        let size = data.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { out in
                ZSTD_compress(out.baseAddress, out.count, input.baseAddress, input.count, 3)
            }
        }
        precondition(ZSTD_isError(size) == 0, "zstd compression failed")
        output.count = size
        return output
    }
}
#endif
