#define NI __attribute__((noinline, noipa))
NI int plugin_helper(int x) { return x * 3; }
int plugin_work(int x) { return plugin_helper(x) + 1; }
