#ifndef C_OPENSSL_SHIM_H
#define C_OPENSSL_SHIM_H

// The system's OpenSSL 3, for TetherTLS. OpenSSL spells many calls as macros, which Swift
// cannot call: the inline functions below give them a callable form.
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

static inline int tether_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}

static inline long tether_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

static inline int tether_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return (int)SSL_set_tlsext_host_name(ssl, name);
}

static inline void tether_BIO_set_mem_eof_return(BIO *bio, int value) {
    BIO_set_mem_eof_return(bio, value);
}

static inline int tether_SSL_get_ex_new_index(void) {
    return SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static inline int tether_SSL_CTX_get_ex_new_index(void) {
    return SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

static inline void tether_OPENSSL_free(void *pointer) {
    OPENSSL_free(pointer);
}

static inline uint64_t tether_SSL_OP_NO_RENEGOTIATION(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t tether_SSL_OP_NO_COMPRESSION(void) { return SSL_OP_NO_COMPRESSION; }
static inline long tether_SSL_MODE_RELEASE_BUFFERS(void) { return SSL_MODE_RELEASE_BUFFERS; }

static inline int tether_ERR_GET_LIB(unsigned long code) { return ERR_GET_LIB(code); }
static inline int tether_ERR_GET_REASON(unsigned long code) { return ERR_GET_REASON(code); }

/// Writes the names a certificate is for into `out` as "a, b, c": its subject alternative
/// names (DNS names and IP addresses), or its common name when it has none. Returns the
/// number of names written.
static inline int tether_x509_names(X509 *cert, char *out, size_t capacity) {
    size_t used = 0;
    int count = 0;
    if (capacity == 0) return 0;
    out[0] = 0;
    GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    if (names != NULL) {
        for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
            const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
            char text[256];
            text[0] = 0;
            if (name->type == GEN_DNS) {
                const unsigned char *bytes = ASN1_STRING_get0_data(name->d.dNSName);
                int length = ASN1_STRING_length(name->d.dNSName);
                if (length > (int)sizeof(text) - 1) length = (int)sizeof(text) - 1;
                memcpy(text, bytes, (size_t)length);
                text[length] = 0;
            } else if (name->type == GEN_IPADD) {
                const unsigned char *bytes = ASN1_STRING_get0_data(name->d.iPAddress);
                int length = ASN1_STRING_length(name->d.iPAddress);
                if (length == 4) {
                    snprintf(text, sizeof(text), "%u.%u.%u.%u", bytes[0], bytes[1], bytes[2], bytes[3]);
                } else if (length == 16) {
                    if (inet_ntop(AF_INET6, bytes, text, sizeof(text)) == NULL) text[0] = 0;
                }
            }
            if (text[0] == 0) continue;
            int written = snprintf(out + used, capacity - used, count ? ", %s" : "%s", text);
            if (written < 0 || (size_t)written >= capacity - used) break;
            used += (size_t)written;
            count++;
        }
        GENERAL_NAMES_free(names);
    }
    if (count == 0) {
        int length = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, out, (int)capacity);
        if (length > 0) count = 1; else out[0] = 0;
    }
    return count;
}

#endif
