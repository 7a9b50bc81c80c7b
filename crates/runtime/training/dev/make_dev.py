# Writes intent_dev.jsonl: the intent layer's development set (see README.md).
import json
EX = "exercise"; CH = "chat"
D = {}
D["exercise_stop"] = (EX, """ok I think I'm done with this one, thanks
can we just stop, this is making me more anxious
honestly this isn't working for me
I'd rather not keep going with this
end exercise
nah im gonna leave it here
thank you, that's enough for me tonight
i want to quit this
lets drop it
this feels silly, can we not do this anymore
that was helpful, I'll leave it there
ugh no, stop it here please
exit pls
I'm not really in the mood for this anymore
thanks for this, I'm going to go to bed now
I've had enough of this one
I feel better now so I'll end it here
this is just not my thing sorry
cn we stop
[es] quiero parar ya
[fr] on arrête là, merci
[de] ich möchte aufhören""")
D["exercise_pause"] = (EX, """hang on a minute
brb 2 min
can we finish this later?
gimme a sec, someone's calling
hold on my mom is yelling for me
I need to step away for a bit but I'll come back to it
pause for now
can we pick this up after dinner
wait one moment please
let me grab some water first, back soon
give me five minutes
can we carry on with this tomorrow? too tired tonight
one min, the kettle is boiling
I have to deal with something, can we resume in a bit
sec, doorbell
hold that thought, back in 10
[es] un momento, ahora vuelvo
[fr] je reviens dans deux minutes
[it] aspetta un attimo, torno subito""")
D["exercise_continue"] = (EX, """ok, I'm ready for what comes next
yep ready, go ahead
go on then, next bit
lets keep at it
and then what do I do?
I'm back, where were we
again please
one more go at it please
ok carry on with it
you can continue now
next one
alright I'm ready for the next part
keep going, this is helping
back now, lets continue
I'm good to move on
ok what do i do after this
[es] sigamos
[de] weiter bitte
[pt] pode continuar""")
D["exercise_done"] = (EX, """donee
finished that part
ok did it
I did the four rounds
all done with that step
I've named all five things
ok I completed the whole step
that's all of them
did all 4 breaths
ok, I wrote it down
yep I've finished that one
I got through the whole thing
ok that's the last one done
i think i managed all of them
there, I've got all of them
finished the list
[fr] c'est fait
[es] listo, ya terminé
[de] ich bin fertig damit""")
D["exercise_easier"] = (EX, """can we make this simpler
this is too hard, something easier?
can we take it a bit slower
can I do fewer
4 seconds feels too long for me
holding my breath that long makes me dizzy, shorter please
could we do a gentler version
can I just name 2 things
too many steps, can we cut it down
that's a lot, can you make it easier
slow down please
can we do a shorter one
I can't keep up, is there a lighter version
can I skip the smell one and just do the others
this is a bit much for me right now, can we simplify
maybe fewer rounds?
[es] más fácil por favor
[fr] on peut faire plus simple ?
[pt] dá pra ser mais devagar?""")
D["exercise_harder"] = (EX, """can we make it harder
this is too easy
can we hold for longer
I'd like something more challenging
let's do more rounds than that
can we count to 6 instead
could you make this more intense
I can handle more, push me
give me a harder version
can we go deeper with this
can the breaths be longer
could you add a few more steps
that was easy, step it up
I'd like to do ten things instead of five
more detail, I want to really dig into it
i'm finding this pretty basic tbh, anything more advanced?
[de] kann es schwieriger sein?
[fr] on peut rendre ça plus difficile
[it] più lungo per favore""")
D["exercise_stuck"] = (EX, """I can't think of anything
i'm totally blanking here
I don't get what I'm supposed to do
not sure what you mean
what counts as a feeling here?
no idea how I'm meant to answer that
I'm trying but nothing is coming
stuck on this one
i tried but I can't hear anything right now
my mind just goes empty
I don't really understand what you're asking
how do I even do this
i cant find 4 things to touch, I'm in bed
I'm confused about this step
idk what to put
[es] no sé qué poner aquí
[fr] je ne comprends pas
[de] ich weiß nicht, was ich schreiben soll""")
D["exercise_not_an_answer"] = (EX, """ok
hmm
sure
uhh ok
ya
🤷
k then
yeah
k
idk
lol
?
mhm
👍
alright
meh
uh
okay...
whatever
fine
[es] vale
[fr] bof
[de] ja""")
D["exercise_answer"] = (EX, """the fridge humming, cars outside, my own breathing
I see a lamp, a mug, my laptop, a plant and a poster
soft blanket
my thought is that everyone thinks I'm stupid
maybe a 6
old coffee in my mug
I can hear the neighbour's dog barking
the stop light outside my window
I felt anxious when my boss emailed me
evidence against: I passed the last exam
my feet on the cold floor
toast burning a little downstairs
I'd say sad and a bit angry
a pause icon on the tv screen
my phone, keys, and a pen
the situation was my exam results coming out
[es] una silla, una mesa y una ventana
[fr] j'entends la pluie
[de] der Kühlschrank brummt""")
D["exercise_side_question"] = (EX, """should I breathe through my nose or mouth?
is it okay if I keep my eyes open?
wait, does it matter if I'm lying down?
what's the point of counting to four?
is it normal that my hands are tingling
sorry my dog just barked, anyway
roughly how long will this take?
can I do this sitting at my desk?
should I say them out loud?
is feeling a bit lightheaded normal
do the things have to be in this room?
can I count the same thing twice?
is this supposed to make me sleepy haha
quick question, does this work for panic attacks?
lol my cat is sitting on my keyboard
[es] ¿tengo que cerrar los ojos?
[fr] est-ce que je dois fermer les yeux ?
[pt] posso fazer de pé?""")
D["exercise_request_calming"] = (CH, """can you help me relax
I need to calm down
I'm so wound up, is there something we can do to settle me
something to calm my nerves please
help me chill out
is there a relaxation exercise we could do
I need to unwind before bed, any exercise?
can you guide me through muscle relaxation
I'm really on edge, can you help me feel calmer
help me calm down before my interview
can you do something soothing with me
I want to relax but I can't, guide me
any exercise to de-stress?
could we try something to calm me down
I'm freaking out, please help me calm down
[es] necesito relajarme, ¿me ayudas?
[fr] tu peux m'aider à me détendre ?
[de] ich muss runterkommen, hilfst du mir?""")
D["exercise_request_breathing"] = (CH, """can we do a breathing exercise
breathe with me please
guide me through some deep breathing
I'd like to try that box breathing
could you walk me through a breathing technique
let's do the 4-7-8 thing
breathing exercise pls
help me slow my breathing down
count breaths with me?
I'd like to do some calm breathing
my breathing is all over the place, can you guide me through a breathing exercise
can we breathe together for a few minutes
square breathing now please
belly breathing exercise?
[es] hagamos un ejercicio de respiración
[fr] guide-moi pour respirer calmement
[pt] me ajuda a respirar""")
D["exercise_request_grounding"] = (CH, """can you ground me
I need a grounding exercise
let's do 5-4-3-2-1
help me feel my body again, I'm spacing out
I feel like I'm floating, help me come back to the present
can we do the five senses thing
I feel disconnected, do a grounding thing with me
I want to stay in the moment, help me
everything feels unreal, can you help me anchor myself
could you do a grounding technique with me
can we do that exercise where I name what I see and hear
help me be present
I'm dissociating a bit, ground me please
i need to feel grounded, can we do an exercise for that
[es] necesito anclarme, ¿hacemos un ejercicio?
[fr] aide-moi à revenir au moment présent
[de] hilf mir, im Hier und Jetzt zu bleiben""")
D["exercise_request_activation"] = (CH, """help me get out of bed
I can't make myself do anything today, can you give me a small task
help me get started on my essay
give me one tiny thing to do
I've been on the couch all day, help me get moving
can we make a little plan for today
help me stop procrastinating
can you suggest something small I could do right now
I want to do something nice for myself, help me pick an activity
help me get going, I'm stuck in a rut
can you help me plan one thing for this afternoon
I need a push to start cleaning my room
can we break my to-do list into something doable
what's one small step I could take now, help me pick
[es] ayúdame a empezar algo
[fr] donne-moi une petite tâche pour me lancer
[pt] me ajuda a sair da cama""")
D["exercise_request_self_compassion"] = (CH, """help me be a bit kinder to me
I'm being so hard on myself, can we do something about it
can we do a self-compassion exercise
I keep beating myself up, help
show me how to go easier on myself
I need to stop hating myself for this mistake, can you help
can you help me talk to myself like a friend would
self compassion break please
help me forgive myself
I'm so critical of myself, is there an exercise for that
guide me through being gentle with myself
can we work on my inner critic
help me accept that I'm only human
can you do that kindness-to-yourself exercise with me
[es] ayúdame a ser más amable conmigo mismo
[fr] aide-moi à être plus indulgent avec moi-même
[it] aiutami a volermi più bene""")
D["exercise_request_thought_work"] = (CH, """help me push back on this thought
can we look at whether this belief is true
I keep thinking everyone hates me, can we pick that apart
can we fill in one of those thought records
help me reframe this
I want to question my negative thinking
can we test this thought I keep having
my brain says I'll fail, help me look at the evidence
can you help me think about this differently
let's do some CBT on this
help me untangle this thought
I think I'm catastrophizing, can we work through it
walk me through questioning a negative thought
is this thought even realistic? help me check
[es] quiero analizar este pensamiento contigo
[fr] on peut remettre en question cette pensée ?
[de] können wir diesen Gedanken überprüfen?""")
D["goodbye"] = (CH, """byeee
ok thats all for now, bye
I'm going to head to bed, goodnight
talk later, ok?
thanks for today, I'll log off now
gotta go, see you
cya tmrw
that's it from me, thanks
night night, thanks for listening
I'm off, thanks for the chat
I'll leave it here for today, bye
time to sleep, bye bye
ok later!! thanks
I think I'm done talking for now, take care
[es] adiós, gracias
[fr] salut, je dois y aller
[de] tschüss und danke
[pt] tchau, até amanhã""")
D["memory_show"] = (CH, """what do you remember about me
show me what you saved
what have you stored about me?
can I see my saved info
list my memories
so what do you know about me by now
what's in your memory
tell me what you've kept from our chats
what did you keep from last time we talked
show my stored notes
what info do you have on me
let me see everything you've remembered
which things have you noted about me
display my saved facts
[es] ¿qué tienes guardado sobre mí?
[fr] montre-moi ce que tu as enregistré
[de] was hast du über mich gespeichert?""")
D["memory_status"] = (CH, """is memory turned on?
are you saving this conversation
will you remember this tomorrow?
do you keep what I tell you
how does your memory work
is any of this being recorded
are you storing any of this
is incognito on right now
do you remember things between sessions?
will this get saved somewhere
is my data stored somewhere
are you able to remember stuff?
is remembering on or off
does this chat get saved
can you tell me if memory is enabled
[es] ¿estás guardando esto?
[fr] est-ce que tu te souviens des conversations ?
[de] merkst du dir, was ich dir erzähle?""")
D["memory_save_fact"] = (CH, """remember that my dog is called Biscuit
please remember I have an exam on the 12th
note that I work night shifts
don't forget that my brother lives in Leeds
save this: my therapist is Dr Patel
keep in mind that I'm vegetarian
can you remember my birthday is in May
remember my girlfriend's name is Ana
I want you to remember that I moved to Berlin last year
make a note that I started a new job
remember I'm allergic to cats
for future reference, my best friend is Tom
could you save that I'm studying nursing
pls remember i have 2 kids
[es] recuerda que mi hermana se llama Lucía
[fr] souviens-toi que j'ai un chat qui s'appelle Milo
[de] merk dir, dass ich in Hamburg wohne""")
D["memory_save_preference"] = (CH, """from now on keep it brief please
please don't use emojis
call me Jess
can you talk more casually with me
I prefer when you ask fewer questions
stop suggesting breathing exercises all the time
always reply in Spanish please
please be more direct with me in future
less advice, more listening from now on
I'd like shorter replies going forward
don't call me buddy
use simpler words with me
remember that I don't like being told to meditate
could you stop starting every reply with "I hear you"
I like it when you're straightforward, keep doing that
[es] háblame de tú, por favor
[fr] à partir de maintenant, réponds plus brièvement
[de] sprich bitte einfacher mit mir""")
D["memory_forget"] = (CH, """forget what I said about my ex
delete all you know about me
please erase my data
remove the thing about my job
forget that
can you wipe your memory of me
I don't want you to remember my address anymore, delete it
clear all my saved info
undo that last save
forget my sister's name
get rid of what you stored about my health
delete that memory
wipe it all
scratch that, don't keep it
[es] olvida lo que te dije
[fr] efface tout ce que tu sais sur moi
[de] lösch meine Daten""")
D["memory_recall_on"] = (CH, """turn your memory on
you're allowed to remember stuff now
enable memory please
start remembering our chats again
switch memory on again
ok I'm fine with you saving stuff
you have my permission to remember
please keep track of what I tell you from now on
memory back on please
I'm done with incognito, go back to normal
I changed my mind, you can save things
resume saving
I allow you to remember
let's turn remembering back on
[es] puedes volver a recordar cosas
[fr] réactive la mémoire
[de] Gedächtnis einschalten""")
D["memory_recall_off"] = (CH, """turn memory off
stop remembering stuff about me
from now on don't save anything I say
can you go incognito
disable your memory
please don't keep any of this
pause memory for now
incognito pls
don't store what I say from here on
switch off saving
no remembering from here on
keep this chat off the record
stop saving my stuff
can we do this one without you saving anything
[es] deja de guardar lo que digo
[fr] arrête de mémoriser
[de] speicher nichts mehr""")
D["grounded_lookup"] = (CH, """what exactly is box breathing
is caffeine bad for anxiety
what does research say about journaling
is exercise good for depression?
how does CBT work
what's the difference between anxiety and panic
how much sleep do adults need
are weighted blankets actually helpful
what is mindfulness
can alcohol affect your mood the next day
what are the symptoms of burnout
is it true that screens before bed hurt sleep
what is a panic attack
does magnesium help with sleep
[es] ¿qué es la ansiedad?
[fr] c'est quoi la pleine conscience ?
[de] was ist eigentlich Achtsamkeit?""")
D["none"] = (CH, """I had a rough day at work
my exam is tomorrow and I'm so nervous
thank you, that means a lot
I remember when we used to go to the beach
I stopped going to the gym last month
I'm so done with my boss
my breathing gets weird when I'm nervous
every time I think about the meeting my stomach drops
hey there
I don't know what to do about my roommate
my mom saved me some leftovers
I feel like nobody listens to me
I've been forgetting things a lot lately
my therapist says I should be kinder to myself
I'm so tired
we broke up last week
I can't stop thinking about what she said
my heart is racing and I don't know why
[es] hoy me siento muy cansado
[fr] j'ai eu une journée difficile
[de] ich bin so gestresst""")
rows = []
n = 0
for intent, (ctx, block) in D.items():
    for line in block.strip().split("\n"):
        line = line.strip()
        if not line: continue
        if line.startswith("[") and "]" in line[:5] and line[1:3].isalpha() and line[3] == "]":
            line = line[4:].strip()
        n += 1
        rows.append({"id": f"d{n:04d}", "text": line, "intent": intent, "context": ctx, "source": "dev"})
from collections import Counter
c = Counter(r["intent"] for r in rows)
print(len(rows), min(c.values()), c)
with open(__import__("os").path.join(__import__("os").path.dirname(__file__), "intent_dev.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
