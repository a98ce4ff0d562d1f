/* Workload for bench/compare: drives the SQLite amalgamation (sqlite3.c
 * from the crates.io package libsqlite3-sys, fetched at benchmark time)
 * with a small query mix on an in-memory database.
 * `sqlite_query ROWS`: insert ROWS rows in one transaction, index them,
 * run aggregate, join, LIKE and ORDER BY queries, update and delete.
 * `sqlite_query 0` opens and closes the database only (start-up). */
#include <stdio.h>
#include <stdlib.h>
#include "sqlite3.h"

static void check(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "sqlite_query: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

static long long query_sum(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    long long sum = 0;
    check(sqlite3_prepare_v2(db, sql, -1, &st, 0), db, sql);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) sum += sqlite3_column_int64(st, i);
    }
    check(rc, db, sql);
    sqlite3_finalize(st);
    return sum;
}

int main(int argc, char **argv) {
    long rows = argc > 1 ? strtol(argv[1], 0, 10) : 20000;
    sqlite3 *db;
    check(sqlite3_open(":memory:", &db), db, "open");
    if (rows == 0) { sqlite3_close(db); puts("0"); return 0; }
    check(sqlite3_exec(db,
        "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, city TEXT, age INTEGER);"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, user INTEGER, amount REAL, item TEXT);",
        0, 0, 0), db, "create");
    check(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
    sqlite3_stmt *u, *o;
    check(sqlite3_prepare_v2(db, "INSERT INTO users(name, city, age) VALUES(?1, ?2, ?3)", -1, &u, 0), db, "prep u");
    check(sqlite3_prepare_v2(db, "INSERT INTO orders(user, amount, item) VALUES(?1, ?2, ?3)", -1, &o, 0), db, "prep o");
    static const char *cities[] = {"Berlin", "Paris", "Lagos", "Lima", "Osaka", "Quito", "Perth"};
    unsigned long x = 88172645463325252UL;
    char buf[64];
    for (long i = 0; i < rows; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        snprintf(buf, sizeof buf, "user%lu", x % 100000);
        sqlite3_bind_text(u, 1, buf, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(u, 2, cities[x % 7], -1, SQLITE_STATIC);
        sqlite3_bind_int(u, 3, (int)(18 + x % 60));
        check(sqlite3_step(u), db, "insert u");
        sqlite3_reset(u);
        snprintf(buf, sizeof buf, "item-%lu", (x >> 20) % 5000);
        sqlite3_bind_int64(o, 1, 1 + (long long)(x % (unsigned long)rows));
        sqlite3_bind_double(o, 2, (double)(x % 100000) / 100.0);
        sqlite3_bind_text(o, 3, buf, -1, SQLITE_TRANSIENT);
        check(sqlite3_step(o), db, "insert o");
        sqlite3_reset(o);
    }
    sqlite3_finalize(u);
    sqlite3_finalize(o);
    check(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
    check(sqlite3_exec(db, "CREATE INDEX users_city ON users(city, age); CREATE INDEX orders_user ON orders(user);", 0, 0, 0), db, "index");
    long long sum = 0;
    sum += query_sum(db, "SELECT count(*), sum(age) FROM users WHERE city = 'Paris' AND age > 40");
    sum += query_sum(db, "SELECT city, count(*), avg(age) FROM users GROUP BY city ORDER BY 2 DESC");
    sum += query_sum(db, "SELECT u.id, sum(o.amount) FROM users u JOIN orders o ON o.user = u.id GROUP BY u.id ORDER BY 2 DESC LIMIT 100");
    sum += query_sum(db, "SELECT count(*) FROM orders WHERE item LIKE 'item-12%'");
    sum += query_sum(db, "SELECT id FROM users ORDER BY name LIMIT 50");
    check(sqlite3_exec(db, "UPDATE orders SET amount = amount * 1.1 WHERE user % 3 = 0", 0, 0, 0), db, "update");
    check(sqlite3_exec(db, "DELETE FROM users WHERE age < 25", 0, 0, 0), db, "delete");
    sum += query_sum(db, "SELECT count(*) FROM users");
    sqlite3_close(db);
    printf("%lld\n", sum);
    return 0;
}
