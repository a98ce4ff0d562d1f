// A program written against compiler-rt's <xray/xray_interface.h>: it must
// behave the same linked against compiler-rt or against fntrace.
#include <xray/xray_interface.h>
#include <cstdint>
#include <cstdio>
#define NI __attribute__((noinline))
static int entries, exits, tails;
static int32_t last_id;
static volatile int sink;
NI int leaf(int x) { sink = x; return x + 1; }
NI int mid(int x) { return leaf(x) * 2; }
[[clang::xray_never_instrument]] static void handler(int32_t id, XRayEntryType t) {
    last_id = id;
    if (t == XRayEntryType::ENTRY) entries++;
    else if (t == XRayEntryType::EXIT) exits++;
    else if (t == XRayEntryType::TAIL) tails++;
}
int main() {
    size_t max = __xray_max_function_id();
    int32_t leaf_id = 0;
    for (size_t i = 1; i <= max; i++)
        if (__xray_function_address((int32_t)i) == (uintptr_t)&leaf) leaf_id = (int32_t)i;
    std::printf("found leaf: %d\n", leaf_id != 0);
    std::printf("bad id address: %lu\n", (unsigned long)__xray_function_address((int32_t)(max + 100)));
    std::printf("set handler: %d\n", __xray_set_handler(handler));
    int s = 0;
    std::printf("patch: %d\n", (int)__xray_patch());
    for (int i = 0; i < 10; i++) s += mid(i);
    std::printf("patched: entries %d exits %d\n", entries, exits);
    std::printf("unpatch: %d\n", (int)__xray_unpatch());
    entries = exits = 0;
    for (int i = 0; i < 10; i++) s += mid(i);
    std::printf("unpatched: entries %d exits %d\n", entries, exits);
    std::printf("patch leaf: %d\n", (int)__xray_patch_function(leaf_id));
    for (int i = 0; i < 10; i++) s += mid(i);
    std::printf("leaf only: entries %d exits %d last is leaf %d\n", entries, exits, last_id == leaf_id);
    std::printf("unpatch leaf: %d\n", (int)__xray_unpatch_function(leaf_id));
    std::printf("patch bad id: %d\n", (int)__xray_patch_function((int32_t)(max + 100)));
    std::printf("remove handler: %d\n", __xray_remove_handler());
    std::printf("sum %d\n", s);
    return 0;
}
