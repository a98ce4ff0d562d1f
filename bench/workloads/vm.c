/* The C workload of the side-by-side suite with many short calls: a small
 * stack virtual machine. A text program is tokenized and compiled to
 * bytecode (identifiers interned in a hash table), then run N times: every
 * instruction is a handler called through a table, and the handlers push
 * and pop through small functions, as an interpreter split over several
 * files would (hence `noinline`). Uninstrumented it makes well over 10 M
 * calls per second. Prints a checksum of the results. Usage: vm N. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

typedef struct {
    long stack[64];
    int sp;
    long vars[32];
    int pc;
    const int *code;
    int running;
} Vm;

typedef void (*Handler)(Vm *);

enum { OP_PUSH, OP_LOAD, OP_STORE, OP_ADD, OP_SUB, OP_MUL, OP_MOD, OP_LT, OP_JZ, OP_JMP, OP_HALT };

NOINLINE void vm_push(Vm *vm, long v) { vm->stack[vm->sp++] = v; }
NOINLINE long vm_pop(Vm *vm) { return vm->stack[--vm->sp]; }
NOINLINE int vm_arg(Vm *vm) { return vm->code[vm->pc++]; }

NOINLINE void op_push(Vm *vm) { vm_push(vm, vm_arg(vm)); }
NOINLINE void op_load(Vm *vm) { vm_push(vm, vm->vars[vm_arg(vm)]); }
NOINLINE void op_store(Vm *vm) { int v = vm_arg(vm); vm->vars[v] = vm_pop(vm); }
NOINLINE void op_add(Vm *vm) { long b = vm_pop(vm), a = vm_pop(vm); vm_push(vm, a + b); }
NOINLINE void op_sub(Vm *vm) { long b = vm_pop(vm), a = vm_pop(vm); vm_push(vm, a - b); }
NOINLINE void op_mul(Vm *vm) { long b = vm_pop(vm), a = vm_pop(vm); vm_push(vm, a * b); }
NOINLINE void op_mod(Vm *vm) { long b = vm_pop(vm), a = vm_pop(vm); vm_push(vm, b ? a % b : 0); }
NOINLINE void op_lt(Vm *vm) { long b = vm_pop(vm), a = vm_pop(vm); vm_push(vm, a < b); }
NOINLINE void op_jz(Vm *vm) { int t = vm_arg(vm); if (!vm_pop(vm)) vm->pc = t; }
NOINLINE void op_jmp(Vm *vm) { vm->pc = vm_arg(vm); }
NOINLINE void op_halt(Vm *vm) { vm->running = 0; }

static const Handler HANDLERS[] = {op_push, op_load, op_store, op_add, op_sub, op_mul,
                                   op_mod,  op_lt,   op_jz,    op_jmp, op_halt};

/* ---- compiler: tokens, interned names, bytecode ---- */

typedef struct {
    const char *p;
    char tok[32];
} Lexer;

NOINLINE int is_space(int c) { return c == ' ' || c == '\n' || c == '\t'; }
NOINLINE int is_ident(int c) { return (c >= 'a' && c <= 'z') || c == '_'; }
NOINLINE int is_digit(int c) { return c >= '0' && c <= '9'; }

NOINLINE const char *next_token(Lexer *lx) {
    while (is_space(*lx->p)) lx->p++;
    if (!*lx->p) return NULL;
    int n = 0;
    if (is_ident(*lx->p) || is_digit(*lx->p)) {
        while ((is_ident(*lx->p) || is_digit(*lx->p)) && n < 31) lx->tok[n++] = *lx->p++;
    } else {
        lx->tok[n++] = *lx->p++;
    }
    lx->tok[n] = 0;
    return lx->tok;
}

static char names[32][32];
static int n_names;

NOINLINE unsigned hash_name(const char *s) {
    unsigned h = 2166136261u;
    while (*s) h = (h ^ (unsigned char)*s++) * 16777619u;
    return h;
}

NOINLINE int intern(const char *s) {
    static int table[64];
    unsigned h = hash_name(s) & 63;
    while (table[h]) {
        if (!strcmp(names[table[h] - 1], s)) return table[h] - 1;
        h = (h + 1) & 63;
    }
    strcpy(names[n_names], s);
    table[h] = ++n_names;
    return n_names - 1;
}

static int code[512];
static int n_code;

NOINLINE void emit(int x) { code[n_code++] = x; }

/* Statements: `NAME = A OP B ;` (A, B names or numbers, OP one of
 * + - * % <), `while NAME {` ... `}`. */
NOINLINE void operand(const char *t) {
    if (is_digit(t[0])) {
        emit(OP_PUSH);
        emit(atoi(t));
    } else {
        emit(OP_LOAD);
        emit(intern(t));
    }
}

NOINLINE void compile(const char *src) {
    Lexer lx = {src, {0}};
    int loops[8], n_loops = 0;
    const char *t;
    while ((t = next_token(&lx))) {
        if (!strcmp(t, "while")) {
            loops[n_loops++] = n_code;
            operand(next_token(&lx));
            next_token(&lx); /* { */
            emit(OP_JZ);
            emit(0);
        } else if (!strcmp(t, "}")) {
            int start = loops[--n_loops];
            emit(OP_JMP);
            emit(start);
            code[start + 3] = n_code;
        } else {
            int dst = intern(t);
            next_token(&lx); /* = */
            operand(next_token(&lx));
            char op = next_token(&lx)[0];
            operand(next_token(&lx));
            next_token(&lx); /* ; */
            emit(op == '+' ? OP_ADD : op == '-' ? OP_SUB : op == '*' ? OP_MUL : op == '%' ? OP_MOD : OP_LT);
            emit(OP_STORE);
            emit(dst);
        }
    }
    emit(OP_HALT);
}

NOINLINE long run(int seed) {
    Vm vm;
    memset(&vm, 0, sizeof vm);
    vm.code = code;
    vm.running = 1;
    vm.vars[intern("seed")] = seed;
    while (vm.running) HANDLERS[vm_arg(&vm)](&vm);
    return vm.vars[intern("acc")];
}

static const char *PROGRAM =
    "i = 0 + 0 ; acc = seed + 0 ; go = i < 40 ;\n"
    "while go {\n"
    "  sq = i * i ; m = sq % 7 ; acc = acc + m ;\n"
    "  t = acc * 3 ; acc = t % 1000003 ;\n"
    "  i = i + 1 ; go = i < 40 ;\n"
    "}\n";

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    compile(PROGRAM);
    long sum = 0;
    for (long k = 0; k < n; k++) sum += run((int)k);
    printf("%ld\n", sum);
    return 0;
}
