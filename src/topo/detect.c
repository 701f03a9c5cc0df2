/* Topology detection: hwloc discovers this host (CPU packages, the PCIe
 * tree, GPUs and NICs as I/O objects) and exports it as its own XML, which
 * topo.c reads as it reads RCOLL_TOPO_FILE. One format, one reader: what
 * is detected can be dumped (RCOLL_TOPO_DUMP_FILE), inspected with
 * rcoll-topo --xml, edited and loaded back. */
#include "config.h"
#include "topo/topo.h"
#include "util/dl.h"
#include "util/params.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_HWLOC
#include <hwloc.h>
#endif

rcoll_status_t rcoll_topo_detect_xml(char **xml, size_t *len, char *err,
                                     size_t errlen)
{
    *xml = NULL;
    *len = 0;
#ifdef HAVE_HWLOC
    hwloc_topology_t t;
    char *buf = NULL;
    int blen = 0;
    char why[320];
    if (rcoll_dl_open(RCOLL_DL_HWLOC, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "hwloc: %s: set RCOLL_TOPO_FILE to an export "
                 "of the host (lstopo --of xml)", why);
        return RCOLL_ERR_NOT_SUPPORTED;
    }
    if (hwloc_topology_init(&t) != 0) {
        snprintf(err, errlen, "hwloc_topology_init: %s", strerror(errno));
        return RCOLL_ERR_SYSTEM;
    }
    /* PCI bridges, GPUs and NICs (with their OS devices: netdevs, RDMA
     * devices, CUDA devices) are what the decisions need */
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t) != 0 ||
        hwloc_topology_export_xmlbuffer(t, &buf, &blen, 0) != 0 || blen <= 0) {
        snprintf(err, errlen, "hwloc could not discover or export this host's "
                 "topology: %s", strerror(errno));
        hwloc_topology_destroy(t);
        return RCOLL_ERR_SYSTEM;
    }
    *xml = malloc((size_t)blen);
    if (*xml) {
        memcpy(*xml, buf, (size_t)blen);
        *len = (size_t)blen - 1; /* without the terminating NUL */
    }
    hwloc_free_xmlbuffer(t, buf);
    hwloc_topology_destroy(t);
    if (!*xml) {
        snprintf(err, errlen, "no memory for the topology");
        return RCOLL_ERR_NO_MEMORY;
    }
    return RCOLL_OK;
#else
    snprintf(err, errlen, "this rcoll was built without hwloc (configure "
             "--with-hwloc): set RCOLL_TOPO_FILE to an export of the host "
             "(lstopo --of xml)");
    return RCOLL_ERR_NOT_SUPPORTED;
#endif
}

static rcoll_status_t topo_get(rcoll_topo_t **out, const char **source,
                               char *err, size_t errlen, const char *dump)
{
    const char *file = rcoll_config.topo_file;
    char *xml = NULL;
    size_t len = 0;
    rcoll_status_t st;
    *out = NULL;
    if (file && file[0]) {
        *source = file;
        st = rcoll_topo_load(file, out, err, errlen);
        if (st != RCOLL_OK || !(dump && dump[0]))
            return st;
        /* dumping a loaded file: the file as read */
        FILE *f = fopen(file, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            if (n > 0 && (xml = malloc((size_t)n)))
                len = fread(xml, 1, (size_t)n, f);
            fclose(f);
        }
    } else {
        *source = "detected by hwloc";
        if ((st = rcoll_topo_detect_xml(&xml, &len, err, errlen)) != RCOLL_OK)
            return st;
        char e2[256] = "";
        if ((st = rcoll_topo_parse(xml, len, out, e2, sizeof(e2))) != RCOLL_OK) {
            snprintf(err, errlen, "hwloc's export of this host: %s", e2);
            free(xml);
            return st;
        }
    }
    if (dump && dump[0] && xml) {
        FILE *f = fopen(dump, "wb");
        int ok = f != NULL;
        if (f) {
            ok = fwrite(xml, 1, len, f) == len;
            ok = fclose(f) == 0 && ok;
        }
        if (!ok) {
            snprintf(err, errlen, "RCOLL_TOPO_DUMP_FILE=%s: %s", dump,
                     strerror(errno));
            free(xml);
            rcoll_topo_free(*out);
            *out = NULL;
            return RCOLL_ERR_SYSTEM;
        }
    }
    free(xml);
    return RCOLL_OK;
}

rcoll_status_t rcoll_topo_get(rcoll_topo_t **out, const char **source,
                              char *err, size_t errlen)
{
    return topo_get(out, source, err, errlen, rcoll_config.topo_dump_file);
}

rcoll_status_t rcoll_topo_read(rcoll_topo_t **out, const char **source,
                               char *err, size_t errlen)
{
    return topo_get(out, source, err, errlen, NULL);
}
