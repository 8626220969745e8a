// SPDX-License-Identifier: GPL-2.0
/*
 * What each user holds across all contexts, per user namespace (see struct
 * mrn_user): found or made at open, charged for every context and
 * registration, against the caps the device's parameters set.
 */

#include <linux/bug.h>
#include <linux/hash.h>
#include <linux/hashtable.h>
#include <linux/slab.h>
#include <linux/user_namespace.h>

#include "mrn_internal.h"

static DEFINE_HASHTABLE(mrn_users, 6);
static DEFINE_SPINLOCK(mrn_users_lock);

static u32 mrn_user_hash(const struct user_namespace *ns, kuid_t uid)
{
	return hash_ptr(ns, 32) ^ __kuid_val(uid);
}

/**
 * mrn_user_get - find or create the accounting of a user in a namespace
 * @ns: the user namespace
 * @uid: the user (the opener's effective uid at the first level, the
 *       owner of the namespace below at the others)
 *
 * Return: a referenced struct mrn_user, whose parents are referenced too,
 * or NULL when out of memory.
 */
struct mrn_user *mrn_user_get(struct user_namespace *ns, kuid_t uid)
{
	struct mrn_user *user, *fresh, *parent = NULL;
	u32 key = mrn_user_hash(ns, uid);

	/* At most 32 levels (the kernel's limit on namespace nesting). */
	if (ns->parent) {
		parent = mrn_user_get(ns->parent, ns->owner);
		if (!parent)
			return NULL;
	}
	/* Shared by many processes: charged to no single memory cgroup. */
	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	spin_lock(&mrn_users_lock);
	hash_for_each_possible(mrn_users, user, node, key) {
		if (user->ns == ns && uid_eq(user->uid, uid) &&
		    refcount_inc_not_zero(&user->ref)) {
			spin_unlock(&mrn_users_lock);
			kfree(fresh);
			if (parent)
				mrn_user_put(parent);
			return user;
		}
	}
	if (fresh) {
		fresh->ns = get_user_ns(ns);
		fresh->uid = uid;
		fresh->parent = parent;
		refcount_set(&fresh->ref, 1);
		hash_add(mrn_users, &fresh->node, key);
	}
	spin_unlock(&mrn_users_lock);
	if (!fresh && parent)
		mrn_user_put(parent);
	return fresh;
}

void mrn_user_put(struct mrn_user *user)
{
	struct mrn_user *parent;

	while (user && refcount_dec_and_lock(&user->ref, &mrn_users_lock)) {
		hash_del(&user->node);
		spin_unlock(&mrn_users_lock);
		/* Every registration and context gave its charge back. */
		WARN_ON_ONCE(atomic_long_read(&user->count[MRN_UC_REGS]) ||
			     atomic_long_read(&user->count[MRN_UC_CONTEXTS]));
		parent = user->parent;
		put_user_ns(user->ns);
		kfree(user);
		user = parent;
	}
}

/*
 * Host root as the owner of namespaces: counted, never capped there. It is
 * who makes rootful containers; with a cap at that level, the containers of
 * a node and the host's root would share one user's worth, and one
 * container could refuse every other. Each container's users still have
 * their own caps, and host root its own for what it registers itself.
 */
static bool mrn_uncapped_owner(const struct mrn_user *user,
			       const struct mrn_user *level)
{
	return level != user && level->ns == &init_user_ns &&
	       uid_eq(level->uid, GLOBAL_ROOT_UID);
}

/*
 * Take one unit of @c at every level of @user, each below @limit; false
 * (nothing taken) at a cap.
 */
bool mrn_charge(struct mrn_user *user, enum mrn_user_count c,
		unsigned int limit)
{
	struct mrn_user *u, *undo;

	for (u = user; u; u = u->parent) {
		if (atomic_long_inc_return(&u->count[c]) > (long)limit &&
		    !mrn_uncapped_owner(user, u)) {
			for (undo = user; undo != u->parent; undo = undo->parent)
				atomic_long_dec(&undo->count[c]);
			mrn_count(MRN_CNT_USER_LIMIT);
			return false;
		}
	}
	return true;
}

void mrn_uncharge(struct mrn_user *user, enum mrn_user_count c)
{
	for (; user; user = user->parent)
		atomic_long_dec(&user->count[c]);
}
