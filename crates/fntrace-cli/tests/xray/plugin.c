#define NI __attribute__((noinline))
static volatile int sink;
NI int plugin_helper(int x) { sink = x; return x * 3; }
int plugin_work(int x) { return plugin_helper(x) + 1; }
