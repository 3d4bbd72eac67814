/* A minimal JSON reader for pycoop's sidecar files: parses a document into a tree of values
 * (objects, arrays, strings, numbers, true/false/null). Strings keep their escapes except
 * \" and \\ (sidecar names are plain identifiers). Header-only; C99. */
#ifndef PYCOOP_HOST_JSON_H
#define PYCOOP_HOST_JSON_H

#include <stdlib.h>
#include <string.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_kind;

typedef struct json {
    json_kind kind;
    double number;          /* JSON_NUMBER, JSON_BOOL (0 or 1) */
    char *string;           /* JSON_STRING; the key of an object member */
    char *key;
    struct json *items;     /* JSON_ARRAY, JSON_OBJECT: `count` children */
    size_t count;
} json;

static const char *json_skip(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    return p;
}

static const char *json_parse_value(const char *p, json *out);

static const char *json_parse_string(const char *p, char **out) {
    const char *start = ++p;            /* after the opening quote */
    size_t n = 0;
    while (*p && *p != '"') {
        if (*p == '\\' && p[1]) p++;
        p++;
        n++;
    }
    if (*p != '"') return NULL;
    char *s = malloc(n + 1), *d = s;
    for (const char *q = start; q < p; q++) {
        if (*q == '\\') q++;
        *d++ = *q;
    }
    *d = '\0';
    *out = s;
    return p + 1;
}

static const char *json_parse_items(const char *p, json *out, char close, int keyed) {
    size_t cap = 4;
    out->items = calloc(cap, sizeof(json));
    p = json_skip(p + 1);
    if (*p == close) return p + 1;
    for (;;) {
        if (out->count == cap) {
            cap *= 2;
            out->items = realloc(out->items, cap * sizeof(json));
        }
        json *item = &out->items[out->count];
        memset(item, 0, sizeof *item);
        if (keyed) {
            if (*p != '"' || !(p = json_parse_string(p, &item->key))) return NULL;
            p = json_skip(p);
            if (*p++ != ':') return NULL;
        }
        if (!(p = json_parse_value(json_skip(p), item))) return NULL;
        out->count++;
        p = json_skip(p);
        if (*p == close) return p + 1;
        if (*p++ != ',') return NULL;
        p = json_skip(p);
    }
}

static const char *json_parse_value(const char *p, json *out) {
    p = json_skip(p);
    if (*p == '{') { out->kind = JSON_OBJECT; return json_parse_items(p, out, '}', 1); }
    if (*p == '[') { out->kind = JSON_ARRAY; return json_parse_items(p, out, ']', 0); }
    if (*p == '"') { out->kind = JSON_STRING; return json_parse_string(p, &out->string); }
    if (!strncmp(p, "true", 4)) { out->kind = JSON_BOOL; out->number = 1; return p + 4; }
    if (!strncmp(p, "false", 5)) { out->kind = JSON_BOOL; return p + 5; }
    if (!strncmp(p, "null", 4)) { out->kind = JSON_NULL; return p + 4; }
    char *end;
    out->kind = JSON_NUMBER;
    out->number = strtod(p, &end);
    return end == p ? NULL : end;
}

/* The member `key` of an object (NULL if absent or not an object). */
static const json *json_get(const json *obj, const char *key) {
    if (!obj || obj->kind != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < obj->count; i++)
        if (!strcmp(obj->items[i].key, key)) return &obj->items[i];
    return NULL;
}

static const char *json_str(const json *v, const char *fallback) {
    return v && v->kind == JSON_STRING ? v->string : fallback;
}

static double json_num(const json *v, double fallback) {
    return v && (v->kind == JSON_NUMBER || v->kind == JSON_BOOL) ? v->number : fallback;
}

#endif
