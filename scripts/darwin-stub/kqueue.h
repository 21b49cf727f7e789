// The part of Darwin's <sys/event.h> that Sources/Tether/Platform/Selector+Kqueue.swift
// uses, with Darwin's types and values, so the file can be type-checked on Linux.
#include <stdint.h>
#include <time.h>

struct kevent {
    uintptr_t ident;
    int16_t filter;
    uint16_t flags;
    uint32_t fflags;
    intptr_t data;
    void *udata;
};

#define EVFILT_READ (-1)
#define EVFILT_WRITE (-2)
#define EVFILT_USER (-10)

#define EV_ADD 0x0001
#define EV_DELETE 0x0002
#define EV_CLEAR 0x0020
#define EV_EOF 0x8000
#define EV_ERROR 0x4000

#define NOTE_TRIGGER 0x01000000

int kqueue(void);
int kevent(int kq, const struct kevent *changelist, int nchanges, struct kevent *eventlist, int nevents,
           const struct timespec *timeout);
