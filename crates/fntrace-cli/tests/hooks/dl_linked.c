#include <stdio.h>
int plugin_work(int x);
int main(void) {
    int s = 0;
    for (int i = 0; i < 10; i++) s += plugin_work(i);
    printf("%d\n", s);
    return 0;
}
