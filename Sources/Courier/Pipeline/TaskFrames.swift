/// Room for the async frames of a request's own task, taken from the task's allocator at once.
///
/// A task's allocator starts with one slab of about 1 KB inside the task and takes every further
/// slab from `malloc` as its frames outgrow the last, and frees them all when the task ends. The
/// stages below the deadline stage and the transport run in a task of their own per request;
/// before the stages were fused into segments their frames took many slabs per request.
/// One call with a 16 KiB frame makes the allocator take one slab that size; the slab stays with
/// the task when the frame is freed, and the frames that follow (the transport's) fill it: fewer
/// instructions per request, before the fusing and after it, and more saved than with an 8 KiB
/// frame (measured: Benchmarks/README.md, "Performance choices in the code"). Frames
/// beyond it take slabs as before. The schedule stage reserves once it holds a slot, so a queued
/// request holds only the frames it has so far: its fused segment's but not the
/// 16 KiB (10,000 queued requests would otherwise hold 160 MB; the peak memory per request of
/// `CourierBenchmarks many` is in the same section).
///
/// The frame's size comes from a local `InlineArray` of 16 KiB of bytes that is declared
/// initialised without being written (setting 16 KiB would cost more than the `malloc`s saved):
/// no byte of it is ever read, and bytes are a trivial type. Other ways tried made the frame
/// larger (an enum with a 16 KiB case got a copy in each frame) or call runtime
/// entry points directly (a compiler warning). `InlineArray` needs macOS, iOS, tvOS, watchOS and
/// visionOS 26; on older Apple systems nothing is reserved (only the saving is lost).
enum TaskFrames {
    /// Makes the current task's allocator hold one slab of about 16 KiB for the frames that follow.
    static func reserve() async {
        if #available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *) {
            await self.reserveRoom()
        }
    }

    @available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *)
    @inline(never)
    private static func reserveRoom() async {
        var room = InlineArray<16_384, UInt8> { (output: inout OutputSpan<UInt8>) in
            output.withUnsafeMutableBufferPointer { buffer, initialized in initialized = buffer.count }
        }
        await self.hold(&room)
    }

    /// Keeps `room` alive across an async call, so that it is part of the caller's async frame.
    @available(macOS 26, iOS 26, tvOS 26, watchOS 26, visionOS 26, *)
    @inline(never)
    private static func hold(_ room: inout InlineArray<16_384, UInt8>) async {
        room[room.count - 1] = 0
    }
}
