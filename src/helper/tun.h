/* Tunnels over the multiplexed helper channel (internal to src/helper; frames in mux.h): a
 * byte stream between a socket on one side and a socket on the other, any number of them
 * on one channel, each pumped by a thread of its own on each side. Used by both ends: the
 * helper (its loopback listeners for the network proxy, the connections of port forwards)
 * and the manager (the proxy's clients, the forwarded host sockets).
 *
 * Flow control: each side may have at most CAE_TUN_WINDOW bytes of a tunnel's data in
 * flight towards the other; the receiver returns credit (TUN_WINDOW frames) as it writes
 * them to its socket. So the channel's reader never blocks on a tunnel (it only queues what
 * the window allows), and a client that does not read stalls its own tunnel only. A peer
 * that sends beyond the window has its tunnel reset. Everything received is untrusted. */
#ifndef CAE_HELPER_TUN_H
#define CAE_HELPER_TUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CAE_TUN_WINDOW (512u * 1024u)
#define CAE_TUN_CHUNK 65536u /* most data bytes a frame carries */
#define CAE_TUN_MAX 128	     /* tunnels at once per channel */

/* Sends one frame on the channel (blocking; a failure means the channel is gone). */
typedef int (*cae_tun_send_fn)(void *ud, char type, uint32_t id, const void *p, size_t n);

typedef struct cae_tun_set cae_tun_set;

/* A set of tunnels on one channel; ids this side opens are id_base | a counter. */
cae_tun_set *cae__tun_set_new(cae_tun_send_fn send, void *ud, uint32_t id_base);
/* A new tunnel id of this side. */
uint32_t cae__tun_next_id(cae_tun_set *s);
/* Pumps between fd (a connected stream socket, taken over: closed on failure too) and tunnel
 * id. open_type != 0: that frame (payload p, n) is sent once the tunnel is registered and
 * before any of its data. Returns 0, -EAGAIN (CAE_TUN_MAX tunnels), -EEXIST or -errno. */
int cae__tun_start(cae_tun_set *s, uint32_t id, int fd, char open_type, const void *p, size_t n);
/* A TUN_DATA, TUN_WINDOW or TUN_CLOSE frame from the peer (body taken over). Never blocks. */
void cae__tun_frame(cae_tun_set *s, char type, uint32_t id, char *body, size_t n);
/* A buffer for a frame body of n bytes (freed by free(), or handed to cae__tun_frame_body,
 * which may keep it for the next): a reused one of CAE_TUN_CHUNK bytes when n fits. */
char *cae__tun_body(cae_tun_set *s, size_t n);
/* cae__tun_frame of a body from cae__tun_body. */
void cae__tun_frame_body(cae_tun_set *s, char type, uint32_t id, char *body, size_t n);
/* Tunnels open now. */
int cae__tun_count(cae_tun_set *s);
/* Ends every tunnel (sockets closed, nothing more sent), waits for their threads, frees.
 * Accepts NULL. */
void cae__tun_set_free(cae_tun_set *s);

#endif
